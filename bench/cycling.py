"""Cycling: what an explicitly invoked request (LSP triggerKind Invoked) offers, and what it
costs, against the automatic request an editor sends while typing. Same tasks, same run.

    python bench/cycling.py [--model DIR] [--per-kind 60] [--kinds single_line,block]
                            [--mode speedy|quality] [--invoked 4] [--threads 2]

Each held-out infill task (bench.tasks) becomes a document (prefix + suffix, the cursor
between) in the language server's own pipeline (`llada_lsp.completion.completions.CompletionService`
over the in-process engine, no transport). Per task, with an empty suggestion cache (`--rescue`: the server's rescueAlternatives):
an Automatic request (its answer time: the first complete draft, as shown while typing;
its final text once the engine is done), then an Invoked request at the same place (decodes
at least `--invoked` candidates, answers every one that fits). Reported per kind: how many
tasks the automatic request left empty (and how many of them a rescue filled), how many
items the invoked answer has, exact match of the automatic final text, of the invoked
first item, and of any invoked item (what a user who cycles can reach), edit similarity,
and p50/p95 answer times with the invoked/automatic ratio. The server plans the span as an
editor would have it (a cursor on an empty line gets a statements plan, several lines,
where the task's gold is one line), so the scores are the server's, not the engine
benchmarks'. Ends with one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.tasks import KINDS, Task, edit_similarity, exact_match, make_tasks  # noqa: E402
from llada_lsp.completion.completions import CompletionService  # noqa: E402
from llada_lsp.engines.engine_client import EngineClient, make_engine  # noqa: E402
from llada_lsp.options import parse_options  # noqa: E402
from llada_lsp.text.documents import DocumentStore  # noqa: E402
from llada_lsp.text.positions import text_position  # noqa: E402

URI = "file:///bench/cycling.py"


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else 0.0


async def request(svc: CompletionService, line: int, char: int, invoked: bool) -> tuple[Any, float]:
    """One request as the server handles it: in its own task (its refinement starts when that
    task is done, as after a response is written). Returns the answer and its time (ms) once
    the refinement is over too."""
    t0 = time.perf_counter()
    answer = await asyncio.create_task(svc.complete(URI, line, char, invoked=invoked))
    ms = (time.perf_counter() - t0) * 1000
    await asyncio.sleep(0)  # the task's done callbacks (the refinement's start) run
    if svc.refiner.tasks:
        await asyncio.gather(*svc.refiner.tasks)
    return answer, ms


async def one(engine: EngineClient, task: Task, opts: dict[str, Any]) -> dict[str, Any]:
    """Both requests at the task's cursor (`auto_empty` and no `items` when the server offers
    nothing there)."""
    store = DocumentStore()
    store.open(URI, "python", 1, task.prefix + task.suffix)
    options, _ = parse_options(opts)
    svc = CompletionService(store, engine, options, lambda m, p: None, lambda: "utf-16")
    line, char = text_position(task.prefix + task.suffix, len(task.prefix), "utf-16")
    auto, auto_ms = await request(svc, line, char, False)
    final = svc.shown[URI].text if auto is not None and URI in svc.shown else ""
    inv, inv_ms = await request(svc, line, char, True)
    items = [inv.text, *inv.others] if inv is not None else []
    return {"auto_ms": auto_ms, "invoked_ms": inv_ms, "items": len(items), "auto_empty": auto is None,
            "rescued": svc.counters["empty_rescued"] > 0,
            "em_auto": exact_match(final, task.middle), "em_first": bool(items) and exact_match(items[0], task.middle),
            "em_any": any(exact_match(x, task.middle) for x in items),
            "es_auto": edit_similarity(final, task.middle),
            "es_best": max((edit_similarity(x, task.middle) for x in items), default=0.0)}


async def run(args: argparse.Namespace) -> None:
    kinds = [k for k in KINDS if k in args.kinds.split(",")]
    tasks = [t for t in make_tasks(args.per_kind, args.seed) if t.kind in kinds]
    engine = make_engine("inprocess", model_dir=args.model, mode=args.mode, device="cpu")
    await engine.start(lambda *a, **k: None)
    opts = {"mode": args.mode, "invokedAlternatives": args.invoked, "rescueAlternatives": args.rescue,
            "speculative": False}
    rows: list[dict[str, Any]] = []  # a kind's name and figures, as the JSON line has them
    try:
        if tasks:
            await one(engine, tasks[0], opts)  # warm-up, not measured
        t0 = time.perf_counter()
        for kind in kinds:
            every = [await one(engine, t, opts) for t in tasks if t.kind == kind]
            outs = [o for o in every if not (o["auto_empty"] and o["items"] == 0)]  # nothing offered
            n = max(1, len(outs))
            auto = [o["auto_ms"] for o in outs]
            inv = [o["invoked_ms"] for o in outs]
            rows.append({
                "kind": kind, "n": len(outs), "items_mean": sum(o["items"] for o in outs) / n,
                "auto_empty": sum(o["auto_empty"] for o in every) / max(1, len(every)),
                "auto_rescued": sum(o["rescued"] for o in every) / max(1, len(every)),
                "several": sum(o["items"] > 1 for o in outs) / n,
                "em_auto": sum(o["em_auto"] for o in outs) / n, "em_first": sum(o["em_first"] for o in outs) / n,
                "em_any": sum(o["em_any"] for o in outs) / n, "es_auto": sum(o["es_auto"] for o in outs) / n,
                "es_best": sum(o["es_best"] for o in outs) / n,
                "auto_p50_ms": statistics.median(auto) if auto else 0.0, "auto_p95_ms": pct(auto, 0.95),
                "invoked_p50_ms": statistics.median(inv) if inv else 0.0, "invoked_p95_ms": pct(inv, 0.95),
            })
            r = rows[-1]
            r["invoked_vs_auto_p50"] = r["invoked_p50_ms"] / r["auto_p50_ms"] if r["auto_p50_ms"] else 0.0
    finally:
        await engine.close()
    print(f"{'kind':11} {'n':>4} {'empty':>5} {'rescd':>5} {'items':>5} {'>1':>5} {'EM auto':>7} {'EM 1st':>6} {'EM any':>6} "
          f"{'ES auto':>7} {'ES best':>7} {'auto p50':>8} {'inv p50':>8} {'inv p95':>8} {'x p50':>5}")
    for r in rows:
        print(f"{r['kind']:11} {r['n']:4d} {r['auto_empty']:5.2f} {r['auto_rescued']:5.2f} {r['items_mean']:5.2f} "
              f"{r['several']:5.2f} {r['em_auto']:7.3f} "
              f"{r['em_first']:6.3f} {r['em_any']:6.3f} {r['es_auto']:7.3f} {r['es_best']:7.3f} "
              f"{r['auto_p50_ms']:8.0f} {r['invoked_p50_ms']:8.0f} {r['invoked_p95_ms']:8.0f} "
              f"{r['invoked_vs_auto_p50']:5.2f}")
    print(json.dumps({"bench": "cycling", "mode": args.mode, "invoked": args.invoked, "rescue": args.rescue,
                      "tasks": len(tasks),
                      "seconds": round(time.perf_counter() - t0, 1),
                      "kinds": {r["kind"]: {k: round(v, 4) if isinstance(v, float) else v for k, v in r.items()
                                            if k != "kind"} for r in rows}}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None)
    ap.add_argument("--per-kind", type=int, default=60)
    ap.add_argument("--kinds", default="single_line,block")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--mode", default="speedy", choices=["speedy", "quality"])
    ap.add_argument("--invoked", type=int, default=4, help="invokedAlternatives")
    ap.add_argument("--rescue", type=int, default=4, help="rescueAlternatives (0: off)")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
