"""Examples from several processes, for trainers that outrun one CPU core (a GPU run).

Cutting, parsing and tokenizing an example takes a few milliseconds on one core: enough for
the 2-core CPU run (a step there takes seconds), far too slow for a GPU step of tens of
milliseconds over a large batch. `ParallelStream` forks `workers` processes, each with its own
`ExampleStream` seeded from (seed, worker, start step), and hands out their batches of rows in
a fixed round-robin order, so a run is deterministic for a given worker count. Resuming at
step s re-seeds the workers from s (the single-process stream instead restores its state).
"""

from __future__ import annotations

import multiprocessing as mp
import queue
from multiprocessing.process import BaseProcess
from typing import Any

from engine.train.data import Encoded, ExampleStream

_AHEAD = 4  # batches each worker may prepare ahead


def _worker(args: tuple[Any, ...], out: Any) -> None:
    texts, weights, tok, sp, block, seed, batch = args
    stream = ExampleStream(texts, weights, tok, sp, block, seed=seed)
    while True:
        out.put([stream.next() for _ in range(batch)])


class ParallelStream:
    def __init__(self, texts: list[str], weights: list[float], tok: Any, sp: Any, block: int,
                 seed: int, batch: int, workers: int, start_step: int = 0) -> None:
        if workers < 1:
            raise ValueError("workers must be >= 1")
        ctx = mp.get_context("fork")  # the texts are shared copy-on-write, nothing is pickled
        self.queues = [ctx.Queue(maxsize=_AHEAD) for _ in range(workers)]
        self.procs: list[BaseProcess] = []
        for k, q in enumerate(self.queues):
            wseed = (seed * 1_000_003 + k) * 1_000_003 + start_step
            p = ctx.Process(target=_worker, args=((texts, weights, tok, sp, block, wseed, batch), q),
                            daemon=True, name=f"examples-{k}")
            p.start()
            self.procs.append(p)
        self.i = 0

    def next_batch(self) -> list[Encoded]:
        q = self.queues[self.i % len(self.queues)]
        self.i += 1
        while True:
            try:
                return q.get(timeout=5.0)
            except queue.Empty:
                dead = [p.name for p in self.procs if not p.is_alive()]
                if dead:
                    raise RuntimeError(f"example workers died: {dead}") from None

    def close(self) -> None:
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            p.join(5)
