"""Arm sets of settled decoding questions, run by the A/B harness (bench/ab.py). Their figures
and decisions are in BENCHMARKS.md; these reproduce them.

    python bench/ab_sets.py t2t [--taus 0.1,0.2,0.3,0.5] [--edits 0.5,0.8] [--multi-block]
    python bench/ab_sets.py loops [--presets quality,speedy] [--repeats 0,3,4]
    python bench/ab_sets.py alternatives [--presets quality,speedy] [--counts 1,2,3,4]
    python bench/ab_sets.py agreement [--presets quality,speedy] [--limits 0,8]
    (each with [--model DIR] [--per-kind N] [--kinds ...] [--rounds N] [--seed S])

- `t2t`: does T2T editing help? Per mask threshold tau, Fast-dLLM's `threshold` (speedy's
  leftmost fallback, no edits) is the baseline of `draft_edit` at tau with each edit threshold
  e (speedy's edit passes), the loop guard off on both (`loops` measures it).
- `loops`: does the degenerate-loop guard help? Each preset at each `loop_repeats` setting
  (engine.decoding.loops; 0 = off), the first the baseline.
- `alternatives`: do alternatives help, and what do they cost? Each preset at each
  `Plan.alternatives` count (engine.decoding.alternatives), the first the baseline; the text
  scored is the one the server would show.
- `agreement`: does context agreement (engine.decoding.lookup) cost quality, and what does it
  save? Each preset at each `context_agreement` limit, the first (0: the published rule) the baseline.
The end-of-middle rule (`END_AHEAD_MIN`) is not an arm set: it is a module constant, not a
setting a request carries; its figures stay in BENCHMARKS.md with the commit that measured it.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.ab import Arm, Group, compare, engines, kinds_and_tasks, report, task_args  # noqa: E402
from bench.tasks import Task  # noqa: E402


def floats(s: str) -> list[float]:
    return [float(x) for x in s.split(",")]


def ints(s: str) -> list[int]:
    return [int(x) for x in s.split(",")]


def by_kind(kinds: list[str], tasks: list[Task]) -> list[tuple[str, list[Task]]]:
    return [(k, [t for t in tasks if t.kind == k]) for k in kinds]


def t2t(args: argparse.Namespace, kinds: list[str], tasks: list[Task]) -> list[Group]:
    from engine.decoding.policies import PRESETS

    fallback = PRESETS["speedy"][1].fallback
    edits = floats(args.edits)
    groups = []
    for tau in floats(args.taus):
        arms = [Arm("threshold", "threshold", {"threshold": tau, "fallback": fallback})]
        arms += [Arm(f"draft_edit e={e}", "speedy", {"mask_threshold": tau, "edit_threshold": e, "loop_repeats": 0})
                 for e in edits]
        if args.multi_block:
            arms.append(Arm(f"draft_edit e={edits[0]} multi", "speedy_multi",
                            {"mask_threshold": tau, "edit_threshold": edits[0], "loop_repeats": 0}))
        groups += [Group({"tau": tau, "kind": k}, arms, ks) for k, ks in by_kind(kinds, tasks)]
    return groups


def loops(args: argparse.Namespace, kinds: list[str], tasks: list[Task]) -> list[Group]:
    return [Group({"preset": p, "kind": k},
                  [Arm(f"loop_repeats={r}", p, {"loop_repeats": r}, settings={"loop_repeats": r})
                   for r in ints(args.repeats)], ks)
            for p in args.presets.split(",") for k, ks in by_kind(kinds, tasks)]


def alternatives(args: argparse.Namespace, kinds: list[str], tasks: list[Task]) -> list[Group]:
    return [Group({"preset": p, "kind": k},
                  [Arm(f"alternatives={c}", p, alternatives=c, settings={"alternatives": c})
                   for c in ints(args.counts)], ks)
            for p in args.presets.split(",") for k, ks in by_kind(kinds, tasks)]


def agreement(args: argparse.Namespace, kinds: list[str], tasks: list[Task]) -> list[Group]:
    return [Group({"preset": p, "kind": k},
                  [Arm(f"context_agreement={n}", p, {"context_agreement": n}, settings={"context_agreement": n})
                   for n in ints(args.limits)], ks)
            for p in args.presets.split(",") for k, ks in by_kind(kinds, tasks)]


SETS = {"t2t": (t2t, ("tau", "kind"), 40), "loops": (loops, ("preset", "kind"), 120),
        "alternatives": (alternatives, ("preset", "kind"), 120), "agreement": (agreement, ("preset", "kind"), 120)}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="set", required=True)
    for name, (_, _, per_kind) in SETS.items():
        p = sub.add_parser(name)
        task_args(p, per_kind)
        if name == "t2t":
            p.add_argument("--taus", default="0.1,0.2,0.3,0.5", help="mask thresholds")
            p.add_argument("--edits", default="0.5,0.8", help="edit thresholds of draft_edit")
            p.add_argument("--multi-block", action="store_true", help="add the arm of the first edit threshold "
                           "with multi-block edit passes (the speedy_multi preset's rule)")
        else:
            p.add_argument("--presets", default="quality,speedy")
            p.set_defaults(kinds="single_line,block")
            if name == "loops":
                p.add_argument("--repeats", default="0,3,4", help="loop_repeats settings; the first is the baseline")
            elif name == "agreement":
                p.add_argument("--limits", default="0,8", help="context_agreement settings; the first is the baseline")
            else:
                p.add_argument("--counts", default="1,2,3,4", help="alternatives settings; the first is the baseline")
    args = ap.parse_args(argv)
    make, keys, _ = SETS[args.set]
    kinds, tasks = kinds_and_tasks(args)
    engine = engines(args)
    t0 = time.perf_counter()
    rows = compare(make(args, kinds, tasks), engine, args.rounds)
    report(args.set, {"model": engine(None).info()["model"]}, len(tasks), args.rounds, t0, keys, rows)


if __name__ == "__main__":
    main()
