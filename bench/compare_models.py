"""Is a new checkpoint better? Two models on the same held-out tasks, paired per task.

    python bench/compare_models.py NEW [--base DIR] [--per-kind N] [--kinds single_line]
                                   [--presets quality,speedy] [--rounds N]

For each preset and kind, the base model (default: the embedded checkpoint) and NEW decode
the same infill tasks, as two arms of the A/B harness (bench/ab.py): TPF, exact match, edit
similarity, parse validity, the empty share and latency of both, and the paired comparison of
NEW against the base (outputs that differ, exact-match and edit-similarity wins and losses,
sign-test p, the p50 ratio with its interval). This is how a training run's weights are judged
before they replace the committed ones. Ends with one JSON line.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.ab import Arm, Group, compare, engines, kinds_and_tasks, report, task_args  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("new", help="checkpoint directory to judge")
    task_args(ap, 120)
    ap.add_argument("--base", default=None, help="checkpoint directory (default: the embedded model)")
    ap.add_argument("--presets", default="quality,speedy")
    ap.set_defaults(kinds="single_line")
    args = ap.parse_args()
    args.model = args.base
    kinds, tasks = kinds_and_tasks(args)
    engine = engines(args)
    groups = [Group({"preset": p, "kind": k}, [Arm("base", p, settings={"model": "base"}),
                                               Arm("new", p, model=args.new, settings={"model": "new"})],
                    [t for t in tasks if t.kind == k])
              for p in args.presets.split(",") for k in kinds]
    t0 = time.perf_counter()
    rows = compare(groups, engine, args.rounds)
    names = {"base": args.base or engine(None).info()["model"], "new": args.new}
    report("compare_models", {"models": names}, len(tasks), args.rounds, t0, ("preset", "kind"), rows)


if __name__ == "__main__":
    main()
