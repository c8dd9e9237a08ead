"""Examples from several processes, for trainers that outrun one CPU core (a GPU run).

Cutting, parsing and tokenizing an example takes a few milliseconds on one core: enough for
the 2-core CPU run (a step there takes seconds), far too slow for a GPU step of tens of
milliseconds over a large batch. `ParallelStream` forks `workers` processes, each with its own
`ExampleStream` seeded from (seed, worker, start step), and hands out their batches of rows in
a fixed round-robin order, so a run is deterministic for a given worker count. Resuming at
step s re-seeds the workers from s (the single-process stream instead restores its state).

With a `BuildSpec` the workers also turn their rows into a `Batch` (noise drawn from a
generator of their own, the autoregressive warm-up decided by the global step each batch
falls on), all but the attention mask, which the trainer builds on its device
(`data.attach_mask`): at batch 128 on one core the rows' tensors take ~0.1 s and the mask
~0.65 s, which would otherwise cap a GPU run at a few steps a second.
"""

from __future__ import annotations

import multiprocessing as mp
import queue
from dataclasses import dataclass, fields
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

import numpy as np
import torch

from engine.train.data import Batch, Encoded, ExampleStream, make_batch


@dataclass(frozen=True)
class BuildSpec:
    """What a worker needs to build whole batches: the vocabulary (random edit tokens) and
    the step at which the autoregressive warm-up ends."""

    vocab: int
    ar_steps: int
    wire: bool = False  # send plain arrays (to_wire), not tensors shared by file descriptor

_AHEAD = 4  # batches each worker may prepare ahead


def _worker(args: tuple[Any, ...], out: Any) -> None:
    texts, weights, tok, sp, block, seed, batch, build, first_step, every = args
    stream = ExampleStream(texts, weights, tok, sp, block, seed=seed)
    noise = torch.Generator().manual_seed(seed)
    torch.set_num_threads(1)
    step = first_step
    while True:
        rows = [stream.next() for _ in range(batch)]
        if build is None:
            out.put(rows)
        else:
            b = make_batch(rows, sp, build.vocab, block, noise, step >= build.ar_steps, with_mask=False)
            out.put(to_wire(b) if build.wire else b)
        step += every


def to_wire(b: Batch) -> dict[str, Any]:
    """A batch as plain arrays for the queue. A tensor put on a multiprocessing queue travels as
    shared memory whose file descriptor the receiver fetches over a socket, one connection per
    tensor (torch's `file_descriptor` strategy); under a sandboxing kernel such as gVisor (the lent
    GPU's) that costs far more than copying the bytes. Arrays are pickled by value."""
    return {f.name: (_narrow(v).numpy() if isinstance(v, torch.Tensor) else v)
            for f in fields(b) for v in (getattr(b, f.name),)}


def _narrow(t: torch.Tensor) -> torch.Tensor:
    return t.int() if t.dtype == torch.long else t  # ids, positions: half the bytes


def from_wire(d: dict[str, Any]) -> Batch:
    def back(v: np.ndarray) -> torch.Tensor:
        t = torch.from_numpy(v)
        return t.long() if t.dtype == torch.int32 else t

    values: dict[str, Any] = {k: (back(v) if isinstance(v, np.ndarray) else v) for k, v in d.items()}
    return Batch(**values)


def pick_transport(b: Batch) -> tuple[bool, dict[str, float]]:
    """Whether batches should cross the queue as arrays (True) or tensors, by timing both."""
    ms = {how: queue_ms(b, how == "arrays", n=4) for how in ("tensors", "arrays")}
    return ms["arrays"] < ms["tensors"], ms


class ParallelStream:
    def __init__(self, texts: list[str], weights: list[float], tok: Any, sp: Any, block: int,
                 seed: int, batch: int, workers: int, start_step: int = 0,
                 build: BuildSpec | None = None) -> None:
        if workers < 1:
            raise ValueError("workers must be >= 1")
        ctx = mp.get_context("fork")  # the texts are shared copy-on-write, nothing is pickled
        self.queues = [ctx.Queue(maxsize=_AHEAD) for _ in range(workers)]
        self.procs: list[BaseProcess] = []
        for k, q in enumerate(self.queues):
            wseed = (seed * 1_000_003 + k) * 1_000_003 + start_step
            p = ctx.Process(target=_worker, args=((texts, weights, tok, sp, block, wseed, batch, build, start_step + k, workers), q),
                            daemon=True, name=f"examples-{k}")
            p.start()
            self.procs.append(p)
        self.i = 0

    def next_batch(self) -> list[Encoded] | Batch:
        """The next rows, or with a `BuildSpec` the next batch (no mask yet)."""
        q = self.queues[self.i % len(self.queues)]
        self.i += 1
        while True:
            try:
                got = q.get(timeout=5.0)
                return from_wire(got) if isinstance(got, dict) else got
            except queue.Empty:
                dead = [p.name for p in self.procs if not p.is_alive()]
                if dead:
                    raise RuntimeError(f"example workers died: {dead}") from None

    def ready(self) -> bool:
        """Whether the next batch in order is already waiting (a hint: `next_batch` may still wait)."""
        return not self.queues[self.i % len(self.queues)].empty()

    def close(self) -> None:
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            p.join(5)


def probe(seconds: float, workers: int, batch: int) -> dict[str, object]:
    """Where a machine's example pipeline spends its time: examples a second in this process,
    one batch's tensors (no mask), and whole batches a second through `workers` processes
    (queue transfer included). Run on a lent GPU's host before training on it."""
    import time

    from engine.model.checkpoint import EMBEDDED_DIR
    from engine.prompt.tokenizer import load_tokenizer, special_tokens_of
    from engine.train.corpus import load_texts

    texts, weights, _ = load_texts()
    tok = load_tokenizer(EMBEDDED_DIR)
    sp = special_tokens_of(tok)
    stream = ExampleStream(texts, weights, tok, sp, 16, seed=0)
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        stream.next()
        n += 1
    rows_per_s = n / (time.perf_counter() - t0)
    rows = [stream.next() for _ in range(batch)]
    t1 = time.perf_counter()
    make_batch(rows, sp, tok.get_vocab_size(), 16, torch.Generator().manual_seed(0), True, with_mask=False)
    batch_s = time.perf_counter() - t1
    built = make_batch(rows, sp, tok.get_vocab_size(), 16, torch.Generator().manual_seed(0), True, with_mask=False)
    transfer = {f"queue_ms_{how}": queue_ms(built, how == "arrays") for how in ("tensors", "arrays")}
    ps = ParallelStream(texts, weights, tok, sp, 16, 0, batch, workers, 0, BuildSpec(tok.get_vocab_size(), 0))
    try:
        ps.next_batch()  # the workers are up
        got, t2 = 0, time.perf_counter()
        while time.perf_counter() - t2 < seconds:
            ps.next_batch()
            got += 1
        batches_per_s = got / (time.perf_counter() - t2)
    finally:
        ps.close()
    return {"rows_per_s_one_process": round(rows_per_s, 1), "batch_tensors_s": round(batch_s, 3),
            "batches_per_s": round(batches_per_s, 2), "workers": workers, "batch": batch, **transfer, **cpu_limits()}


def _send(b: Batch, wire: bool, n: int, out: Any, done: Any) -> None:
    for _ in range(n):
        out.put(to_wire(b) if wire else b)
    done.wait(60)  # a tensor's descriptor is fetched from this process: stay until received


def queue_ms(b: Batch, wire: bool, n: int = 8) -> float:
    """Milliseconds a batch takes through a multiprocessing queue from another process, as
    tensors (shared memory by file descriptor) or as arrays (`to_wire`)."""
    import time

    ctx = mp.get_context("fork")
    q, done = ctx.Queue(maxsize=2), ctx.Event()
    p = ctx.Process(target=_send, args=(b, wire, n + 1, q, done), daemon=True)
    p.start()
    q.get()  # the sender is up
    t0 = time.perf_counter()
    for _ in range(n):
        got = q.get(timeout=60)
        if wire:
            from_wire(got)
    elapsed = time.perf_counter() - t0
    done.set()
    p.join(10)
    return round(elapsed / n * 1000, 2)


def cpu_limits() -> dict[str, object]:
    """What the host lets this process use: cores seen, cores it may run on, the cgroup's CPU
    quota (a container may see 16 cores and get 2), and the load at the moment."""
    import os

    quota = Path("/sys/fs/cgroup/cpu.max")  # cgroup v2: "max 100000" or "200000 100000"
    v1 = Path("/sys/fs/cgroup/cpu/cpu.cfs_quota_us")  # cgroup v1: -1 or 200000 (with the period)
    out: dict[str, object] = {"cpu_count": os.cpu_count(), "affinity": len(os.sched_getaffinity(0)),
                              "load1": round(os.getloadavg()[0], 2)}
    if quota.exists():
        out["cgroup_cpu_max"] = quota.read_text().strip()
    elif v1.exists():
        out["cgroup_cpu_max"] = f"{v1.read_text().strip()} {(v1.parent / 'cpu.cfs_period_us').read_text().strip()}"
    return out


if __name__ == "__main__":
    import argparse
    import json

    ap = argparse.ArgumentParser(description="Time this machine's example pipeline (probe()).")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=128)
    a = ap.parse_args()
    print(json.dumps({"probe": "examples", **probe(a.seconds, a.workers, a.batch)}))
