"""Does the degenerate-loop guard help? Each preset with the guard off against the same preset
with it on, paired over the same held-out tasks.

    python bench/loops.py [--model DIR] [--per-kind 120] [--kinds single_line,block]
                          [--presets quality,speedy] [--repeats 0,3,4]

`--repeats` lists the settings of `loop_repeats` (engine.decoding.loops: the token that would complete
that many back-to-back copies of a 1-8 token unit is forbidden; 0 = off); the first one is
the baseline of each preset. Per arm: TPF, exact match, edit similarity, parse validity of
the non-empty results and the empty share, and against the baseline the paired columns
(outputs that differ, EM and ES wins/losses, sign-test p). Ends with one JSON line.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.t2t import Arm, engine_and_tasks, paired, report, run, task_args  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    task_args(ap, 120)
    ap.add_argument("--presets", default="quality,speedy")
    ap.add_argument("--repeats", default="0,3,4", help="loop_repeats settings; the first is the baseline")
    ap.set_defaults(kinds="single_line,block")
    args = ap.parse_args()
    from engine.decoding.policies import make_policy

    eng, kinds, tasks = engine_and_tasks(args)
    settings = [int(x) for x in args.repeats.split(",")]
    t0 = time.perf_counter()
    rows = []
    for preset in args.presets.split(","):
        for kind in kinds:
            ks = [t for t in tasks if t.kind == kind]
            arms = [Arm(str(r), [run(eng, t, make_policy(preset, loop_repeats=r)) for t in ks]) for r in settings]
            for arm in arms:
                n = max(1, len(arm.outcomes))
                row = {"preset": preset, "kind": kind, "loop_repeats": int(arm.label), "n": len(arm.outcomes),
                       **arm.summary(), "empty": sum(o.parse is None for o in arm.outcomes) / n}
                if arm is not arms[0]:
                    row |= paired(arms[0], arm)
                rows.append(row)
    report("loops", eng.info()["model"], len(tasks), t0,
           f"{'preset':8} {'kind':11} {'loop':>4} {'TPF':>5} {'EM':>5} {'ES':>5} {'parse':>5} {'empty':>5}", rows,
           lambda r: f"{r['preset']:8} {r['kind']:11} {r['loop_repeats']:4d} {r['tpf']:5.2f} "
                     f"{r['exact_match']:5.2f} {r['edit_sim']:5.2f} {r['parse_ok']:5.2f} {r['empty']:5.2f}")


if __name__ == "__main__":
    main()
