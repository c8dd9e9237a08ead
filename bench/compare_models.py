"""Is a new checkpoint better? Two models on the same held-out tasks, paired per task.

    python bench/compare_models.py NEW [--base DIR] [--per-kind N] [--kinds single_line]
                                   [--presets quality,speedy]

For each preset and kind, the base model (default: the embedded checkpoint) and NEW decode
the same infill tasks; the table gives TPF, exact match, edit similarity, parse validity and
the empty share of both, and the paired comparison of NEW against the base (outputs that
differ, exact-match and edit-similarity wins and losses, sign-test p). This is how a training
run's weights are judged before they replace the committed ones. Ends with one JSON line.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.t2t import Arm, engine_and_tasks, paired, print_table, run, task_args  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("new", help="checkpoint directory to judge")
    task_args(ap, 120)
    ap.add_argument("--base", default=None, help="checkpoint directory (default: the embedded model)")
    ap.add_argument("--presets", default="quality,speedy")
    ap.set_defaults(kinds="single_line")
    args = ap.parse_args()
    from engine.decoding.policies import make_policy
    from engine.service import TextEngine

    args.model = args.base
    base_eng, kinds, tasks = engine_and_tasks(args)
    new_eng = TextEngine(args.new, threads=args.threads, device=args.device)
    t0 = time.perf_counter()
    rows = []
    for preset in args.presets.split(","):
        for kind in kinds:
            ks = [t for t in tasks if t.kind == kind]
            arms = [Arm(label, [run(eng, t, make_policy(preset)) for t in ks])
                    for label, eng in (("base", base_eng), ("new", new_eng))]
            for arm in arms:
                n = max(1, len(arm.outcomes))
                row = {"preset": preset, "kind": kind, "model": arm.label, "n": len(arm.outcomes), **arm.summary(),
                       "empty": sum(o.parse is None for o in arm.outcomes) / n}
                if arm is arms[1]:
                    row |= paired(arms[0], arm)
                rows.append(row)
    names = {"base": args.base or base_eng.info()["model"], "new": args.new}
    print(f"base {names['base']}, new {names['new']}, {len(tasks)} tasks, {time.perf_counter() - t0:.0f} s")
    print_table(f"{'preset':8} {'kind':11} {'model':5} {'TPF':>5} {'EM':>5} {'ES':>5} {'parse':>5} {'empty':>5}", rows,
                lambda r: f"{r['preset']:8} {r['kind']:11} {r['model']:5} {r['tpf']:5.2f} {r['exact_match']:5.2f} "
                          f"{r['edit_sim']:5.2f} {r['parse_ok']:5.2f} {r['empty']:5.2f}")
    print(json.dumps({"bench": "compare_models", "models": names, "tasks": len(tasks),
                      "rows": [{k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items()} for r in rows]}))


if __name__ == "__main__":
    main()
