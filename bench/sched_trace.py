"""Where a batched scheduler step goes: the concurrency load, in process, without sockets.

    python bench/sched_trace.py [--model DIR] [--clients 8] [--sessions 48] [--requests 4]
                                [--threads T] [--seed 0]

`bench/concurrency.py` measures the daemon end to end; this drives `engine.decoding.scheduler.Scheduler`
directly with the same pool of typing sessions (N clients draw sessions until the pool is
empty, each submitting its next completion when the last one is done), once with one client
(one request at a time: the baseline) and once with N, and splits the wall time into forwards
(by shape: decode steps of one block, steps where a row also feeds its finished block's
clean tokens, prompt prefills), per-row updates (policy, confidences, stop rule, text) and the
rest. The ratio of the forwards alone bounds what any scheduling change can reach on this
model and machine. Prints two tables and ends with one JSON line.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from torch import Tensor  # noqa: E402

from bench.concurrency import Task, sessions  # noqa: E402
from engine.api import CompletionRequest, EngineEvent  # noqa: E402
from engine.decoding.decode import Feed  # noqa: E402
from engine.decoding.jobs import Key  # noqa: E402
from engine.decoding.rejections import Rejection
from engine.decoding.scheduler import Job, Scheduler  # noqa: E402
from engine.service import TextEngine  # noqa: E402

PREFILL = "prefill"


@dataclass
class Trace:
    forwards: list[tuple[str, int, int, int, float]] = field(default_factory=list)  # kind, rows, fed, padded, ms
    update_ms: float = 0.0
    row_updates: int = 0


class TracedScheduler(Scheduler):
    """The daemon's scheduler with each forward's shape and time and each update's time kept."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.trace = Trace()

    def _forward(self, group: list[tuple[Job, Feed]]) -> dict[Key, Tensor]:
        lens = [len(f.ids) for _, f in group]
        b = self.engine.model.config.block_size
        kind = PREFILL if max(lens) > self.prefill_split else ("block+clean" if max(lens) > b else "block")
        t0 = time.perf_counter()
        out = super()._forward(group)
        self.trace.forwards.append((kind, len(group), sum(lens), len(group) * max(lens),
                                    (time.perf_counter() - t0) * 1000))
        return out

    def _update(self, jobs: list[Job], results: dict[Key, Tensor]) -> None:
        t0 = time.perf_counter()
        super()._update(jobs, results)
        self.trace.update_ms += (time.perf_counter() - t0) * 1000
        self.trace.row_updates += len(results)


def drive(engine: TextEngine, work: list[list[Task]], clients: int, tag: str,
          pack: bool | None = None) -> dict[str, Any]:
    """Run the whole pool through a fresh scheduler with `clients` concurrent sessions."""
    sched = TracedScheduler(engine, max_batch=clients, pack=pack)
    engine.prompt_cache.clear()
    pool = list(enumerate(work))
    total = sum(len(s) for s in work)
    finished: list[str] = []

    def start_client(cid: int) -> None:
        state: dict[str, Any] = {"todo": [], "doc": "", "n": 0}

        def submit_next() -> None:
            while not state["todo"]:
                if not pool:
                    return
                k, tasks = pool.pop(0)
                state["todo"], state["doc"] = list(tasks), f"trace://{tag}-{k}"
            pre, suf, plan = state["todo"].pop(0)
            state["n"] += 1
            req = CompletionRequest(f"{cid}-{state['n']}", state["doc"], f"# {tag}\n{pre}", suf, plan)
            sched.submit(req, cid, emit)

        def emit(ev: EngineEvent, why: Rejection | None) -> None:
            if ev.kind == "error":
                raise RuntimeError(f"request {ev.request_id} failed ({why}): {ev.error}")
            if ev.kind == "done":
                finished.append(ev.request_id)
                submit_next()

        submit_next()

    for c in range(clients):
        start_client(c)
    t0 = time.perf_counter()
    steps = 0
    while len(finished) < total:
        steps += sched.step() > 0
    wall = (time.perf_counter() - t0) * 1000
    tr = sched.trace
    fwd_ms = sum(f[4] for f in tr.forwards)
    by_kind: dict[str, dict[str, float]] = defaultdict(lambda: {"n": 0, "ms": 0.0, "rows": 0, "fed": 0, "padded": 0})
    for kind, rows, fed, padded, ms in tr.forwards:
        d = by_kind[kind]
        d["n"] += 1
        d["ms"] += ms
        d["rows"] += rows
        d["fed"] += fed
        d["padded"] += padded
    return {"completions": total, "wall_ms": wall, "throughput": total / wall * 1000, "steps": steps,
            "forwards": len(tr.forwards), "forward_ms": fwd_ms, "update_ms": tr.update_ms,
            "update_ms_per_row": tr.update_ms / max(1, tr.row_updates),
            "other_ms": wall - fwd_ms - tr.update_ms, "by_kind": dict(by_kind)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", help="checkpoint directory (default: the embedded model)")
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--sessions", type=int, default=48)
    ap.add_argument("--requests", type=int, default=4, help="completions per session")
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, help="torch CPU threads (default: every core)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--pack", choices=("auto", "on", "off"), default="auto",
                    help="the scheduler's packing of ragged decode feeds (auto: on for a CPU)")
    ap.add_argument("--dtype", default="float32", help="float32 | bfloat16 | auto (as the daemon's --dtype)")
    args = ap.parse_args()
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    from engine.model.loader import resolve_dtype

    engine = TextEngine(args.model, dtype=resolve_dtype(args.dtype, "cpu"))
    # as `llada-engine serve` sizes it: two entries a row, so concurrent sessions keep theirs
    engine.prompt_cache.max_entries = max(engine.prompt_cache.max_entries, 2 * args.clients)
    work = sessions(args.sessions, args.requests, args.seed, args.max_tokens, False)
    drive(engine, work[:2], 1, "warm-up")
    pack = {"auto": None, "on": True, "off": False}[args.pack]
    runs = {"sequential": drive(engine, work, 1, "seq", pack),
            f"{args.clients} clients": drive(engine, work, args.clients, "batched", pack)}
    seq, bat = runs["sequential"], runs[f"{args.clients} clients"]

    print(f"{'run':>10} {'compl/s':>8} {'steps':>6} {'fwd/step':>8} {'fwd ms':>8} {'update ms':>9} "
          f"{'per row':>8} {'other ms':>8}")
    for name, r in runs.items():
        print(f"{name:>10} {r['throughput']:8.2f} {r['steps']:6d} {r['forwards'] / max(1, r['steps']):8.2f} "
              f"{r['forward_ms']:8.0f} {r['update_ms']:9.0f} {r['update_ms_per_row']:8.2f} {r['other_ms']:8.0f}")
    print(f"\n{'run':>10} {'forward kind':>12} {'count':>6} {'ms':>7} {'ms each':>8} {'rows':>5} {'fed':>7} {'padded':>7}")
    for name, r in runs.items():
        for kind, d in sorted(r["by_kind"].items(), key=lambda kv: -kv[1]["ms"]):
            print(f"{name:>10} {kind:>12} {d['n']:6d} {d['ms']:7.0f} {d['ms'] / d['n']:8.2f} "
                  f"{d['rows'] / d['n']:5.2f} {d['fed']:7d} {d['padded']:7d}")
    ratio = bat["throughput"] / seq["throughput"]
    fwd_ratio = seq["forward_ms"] / bat["forward_ms"]
    print(f"\nbatched vs sequential {ratio:.2f}x; forwards alone {fwd_ratio:.2f}x (the ceiling of any "
          f"scheduling change on this load)")
    rnd = {name: {k: (round(v, 3) if isinstance(v, float) else v) for k, v in r.items() if k != "by_kind"}
           for name, r in runs.items()}
    print(json.dumps({"bench": "sched_trace", "clients": args.clients, "threads": torch.get_num_threads(),
                      "dtype": str(engine.model.output.weight.dtype).removeprefix("torch."), "pack": args.pack,
                      "runs": rnd, "batched_vs_sequential": round(ratio, 3), "forwards_only_ratio": round(fwd_ratio, 3)}))


if __name__ == "__main__":
    main()
