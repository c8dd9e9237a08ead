"""The same engine requests through two checkouts' engines: is the code faster, on this machine?

`bench/lsp_latency.py`'s first-suggestion p50 moves with the machine (a session's VM may be
twice as fast as the last one's) and with what the server answers (a tree that shows more
suggestions gets more type-throughs, which take ~2 ms): it cannot tell two checkouts' engines
apart on different days. This bench can. It records the engine requests of one real typing
session (`--record`: `bench/lsp_latency.py` typing the held-out file into this checkout's
server, `bench/recording_server.py` appending each request the engine loop admits), then
replays them, in order and each to its end, through this checkout's engine and each
`--tree NAME=DIR`'s (`git worktree add DIR REV`), a fresh process per tree and round,
alternated. It times each request to its first complete draft (what the server shows first)
and compares the drafts that every tree decoded to the same text in the same number of
forwards: ms per forward and the draft time p50, overall and for 2-, 3- and 4-forward drafts,
and their ratios to this checkout (above 1: this checkout is faster). A table, one JSON line.

    python bench/draft_replay.py [--requests FILE] [--chars 200] [--tree old=/tmp/old ...]
                                 [--rounds 2] [--threads auto|N] [--limit N]

Without `--requests`, the session is recorded first (into a temporary file; `--record FILE`
keeps it). `--threads auto` lets each tree choose its threads as it would in the server
(an older tree may use torch's default); a number fixes them in every tree.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
Draft = tuple[float, int, str]  # ms to the first complete draft, forwards by then, its text


def record(out: Path, chars: int) -> None:
    """The engine requests of one typing session into `out` (JSON lines)."""
    env = dict(os.environ, LLADA_BENCH_RECORD=str(out))
    subprocess.run([sys.executable, str(ROOT / "bench/lsp_latency.py"), "--chars", str(chars),
                    "--server-script", str(ROOT / "bench/recording_server.py")],
                   env=env, check=True, stdout=subprocess.DEVNULL)


def requests(path: Path, limit: int) -> list[Any]:
    """The first `limit` recorded requests of `path` as the engine importable here takes them
    (`engine.api.CompletionRequest`; a Plan field this tree lacks is left out)."""
    from engine.api import CompletionRequest, ContextChunk, Names, Plan

    plan_keys = {f.name for f in dataclasses.fields(Plan)}
    out = []
    for n, line in enumerate(path.read_text().splitlines()[:limit]):
        d = json.loads(line)
        fields: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in d["plan"].items()
                                  if k in plan_keys}
        names = d.get("names")
        out.append(CompletionRequest(f"replay-{n}", d["doc_key"], d["prefix"], d["suffix"], Plan(**fields),
                                     tuple(ContextChunk(c["path"], c["text"]) for c in d.get("context") or ()),
                                     Names(names["typed"], tuple(names["names"]), names.get("keep_own_above", 0.9))
                                     if names else None))
    return out


def replay(path: Path, threads: str, limit: int) -> list[Draft]:
    """Every request of `path` through the engine importable here (this process's tree)."""
    import torch

    from engine.service import TextEngine

    if threads == "auto":
        eng = TextEngine()
    else:
        torch.set_num_threads(int(threads))
        try:
            eng = TextEngine(threads=int(threads))
        except TypeError:  # an older tree: no threads of its own
            eng = TextEngine()
    out: list[Draft] = []
    for req in requests(path, limit):
        t0 = time.perf_counter()
        first: Draft | None = None
        for ev in eng.complete(req):
            if first is None and (ev.draft_complete or ev.kind in ("done", "error")):
                first = ((time.perf_counter() - t0) * 1000, ev.step, ev.text)
        assert first is not None
        out.append(first)
    return out


def run_tree(tree: Path, path: Path, threads: str, limit: int) -> list[Draft]:
    """`replay` in a fresh process whose `engine` is `tree`'s."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    # -P: bench/ (the script's folder, whose kernels.py would shadow the package) stays off sys.path
    res = subprocess.run([sys.executable, "-P", str(Path(__file__).resolve()), "--replay-here", str(path),
                          "--threads", threads, "--limit", str(limit)],
                         cwd=tree, env=env, check=True, capture_output=True, text=True)
    return [tuple(x) for x in json.loads(res.stdout.strip().splitlines()[-1])]  # type: ignore[misc]


def p50(xs: list[float]) -> float:
    return round(statistics.median(xs), 2) if xs else float("nan")


def compare(runs: dict[str, list[list[Draft]]]) -> dict[str, Any]:
    """Per tree, over the drafts that every tree and round decoded alike: ms per forward and
    draft p50 (each request's median over the rounds), overall and by forwards."""
    names = list(runs)
    n = min(len(r) for rounds in runs.values() for r in rounds)
    same = [i for i in range(n) if len({(r[i][1], r[i][2]) for rounds in runs.values() for r in rounds}) == 1]
    rows: dict[str, Any] = {}
    for name in names:
        ms = {i: statistics.median(r[i][0] for r in runs[name]) for i in same}
        steps = {i: runs[name][0][i][1] for i in same}
        row = {"ms_per_forward_p50": p50([ms[i] / max(1, steps[i]) for i in same]),
               "draft_ms_p50": p50([ms[i] for i in same])}
        for k in (2, 3, 4):
            row[f"draft_ms_p50_{k}_forwards"] = p50([ms[i] for i in same if steps[i] == k])
        rows[name] = row
    base = rows[names[0]]
    for name in names[1:]:
        rows[name]["ratio"] = round(rows[name]["ms_per_forward_p50"] / base["ms_per_forward_p50"], 3)
    return {"requests": n, "identical": len(same), "by_forwards": {k: sum(1 for i in same if runs[names[0]][0][i][1] == k)
                                                                   for k in (2, 3, 4)}, "trees": rows}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--requests", type=Path, help="recorded requests (JSON lines); default: record now")
    p.add_argument("--record", type=Path, help="where to keep the recording")
    p.add_argument("--chars", type=int, default=200, help="characters typed while recording")
    p.add_argument("--tree", action="append", default=[], metavar="NAME=DIR", help="another checkout")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--threads", default="auto", help="auto (each tree's own choice) or a number")
    p.add_argument("--limit", type=int, default=10**9, help="replay the first N requests only")
    p.add_argument("--replay-here", type=Path, help=argparse.SUPPRESS)  # one tree's replay (a child)
    args = p.parse_args(argv)
    if args.replay_here:
        print(json.dumps(replay(args.replay_here, args.threads, args.limit)))
        return 0
    path = args.requests or args.record or Path(tempfile.mkdtemp()) / "requests.jsonl"
    if args.requests is None:
        path.unlink(missing_ok=True)
        record(path, args.chars)
    trees = {"this": ROOT} | {k: Path(v).resolve() for k, v in (t.split("=", 1) for t in args.tree)}
    runs: dict[str, list[list[Draft]]] = {k: [] for k in trees}
    for r in range(args.rounds):
        for name in (list(trees) if r % 2 == 0 else list(trees)[::-1]):  # alternated: drift hits all alike
            runs[name].append(run_tree(trees[name], path, args.threads, args.limit))
    res = compare(runs)
    print(f"{res['requests']} requests, {res['identical']} decoded alike by every tree "
          f"(2/3/4 forwards: {res['by_forwards']}), threads {args.threads}, {args.rounds} rounds, "
          f"load {os.getloadavg()[0]:.2f}")
    cols = ("ms_per_forward_p50", "draft_ms_p50", "draft_ms_p50_2_forwards", "draft_ms_p50_3_forwards",
            "draft_ms_p50_4_forwards", "ratio")
    print(f"{'tree':<10}" + "".join(f"{c.removeprefix('draft_ms_p50_').replace('_forwards', ' fwd'):>20}" for c in cols))
    for name, row in res["trees"].items():
        print(f"{name:<10}" + "".join(f"{row.get(c, '-')!s:>20}" for c in cols))
    print(json.dumps({"bench": "draft_replay", "threads": args.threads, "rounds": args.rounds} | res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
