"""When may an end-of-middle commit ahead of a mask? A paired comparison on the same tasks.

    python bench/end_rule.py [--model DIR] [--per-kind N] [--presets speedy,quality] [--values 0,1.01]

A committed end-of-middle ends the completion (the masks after it are never decoded).
`engine.decoding.decode.END_AHEAD_MIN` is the confidence it needs to commit while a mask is still
before it: 0 treats it like any token, above 1 only lets it commit behind committed tokens.
For each preset and kind, every value runs the same held-out tasks; the table gives TPF,
exact match, edit similarity, parse validity, empty share and mean length, and the paired
comparison of each value against the first (outputs that differ, exact-match and
edit-similarity wins and losses, sign-test p). Ends with one JSON line.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.t2t import Arm, engine_and_tasks, paired, report, run, task_args  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    task_args(ap, 24)
    ap.add_argument("--presets", default="speedy,quality")
    ap.add_argument("--values", default="0,1.01", help="END_AHEAD_MIN values; the first is the baseline")
    args = ap.parse_args()
    import engine.decoding.decode as decode
    from engine.decoding.policies import make_policy

    eng, kinds, tasks = engine_and_tasks(args)
    values = [float(v) for v in args.values.split(",")]
    default = decode.END_AHEAD_MIN
    t0 = time.perf_counter()
    rows = []
    try:
        for preset in args.presets.split(","):
            for kind in kinds:
                ks = [t for t in tasks if t.kind == kind]
                arms = []
                for v in values:
                    decode.END_AHEAD_MIN = v
                    arms.append(Arm(f"{v:g}", [run(eng, t, make_policy(preset)) for t in ks]))
                for arm in arms:
                    n = max(1, len(arm.outcomes))
                    row = {"preset": preset, "kind": kind, "end_ahead_min": float(arm.label), "n": len(arm.outcomes),
                           **arm.summary(), "empty": sum(o.parse is None for o in arm.outcomes) / n,
                           "mean_chars": sum(len(o.text) for o in arm.outcomes) / n}
                    if arm is not arms[0]:
                        row |= paired(arms[0], arm)
                    rows.append(row)
    finally:
        decode.END_AHEAD_MIN = default
    report("end_rule", eng.info()["model"], len(tasks), t0,
           f"{'preset':8} {'kind':11} {'ahead':>5} {'TPF':>5} {'EM':>5} {'ES':>5} {'parse':>5} {'empty':>5} "
           f"{'chars':>6}", rows,
           lambda r: f"{r['preset']:8} {r['kind']:11} {r['end_ahead_min']:5.2f} {r['tpf']:5.2f} "
                     f"{r['exact_match']:5.2f} {r['edit_sim']:5.2f} {r['parse_ok']:5.2f} {r['empty']:5.2f} "
                     f"{r['mean_chars']:6.1f}")


if __name__ == "__main__":
    main()
