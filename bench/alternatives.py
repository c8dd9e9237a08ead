"""Do alternatives help, and what do they cost? One candidate against several, paired over
the same held-out tasks.

    python bench/alternatives.py [--model DIR] [--per-kind 120] [--kinds single_line,block]
                                 [--presets quality,speedy] [--counts 1,2,3,4]

`--counts` lists `Plan.alternatives` settings (engine.decoding.alternatives: the primary plus
forks from the 2nd..n-th most likely first tokens, decoded in the same batched forwards);
the first is the baseline of each preset. The text scored is the one the language server
would show: the first candidate that adds no parse error (llada_lsp.postprocess.first_fitting).
Per arm: TPF (the primary's tokens over every forward the request caused, `stats.forwards`), exact match, edit similarity,
parse validity of the non-empty results, the empty share, p50/p95 latency of the whole group
and its ratio to the baseline's; against the baseline the paired columns (outputs that differ,
EM and ES wins/losses, sign-test p). Ends with one JSON line.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.t2t import Arm, engine_and_tasks, paired, report, run, task_args  # noqa: E402


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else 0.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    task_args(ap, 120)
    ap.add_argument("--presets", default="quality,speedy")
    ap.add_argument("--counts", default="1,2,3,4", help="alternatives settings; the first is the baseline")
    ap.set_defaults(kinds="single_line,block")
    args = ap.parse_args()
    from engine.decoding.policies import make_policy

    eng, kinds, tasks = engine_and_tasks(args)
    counts = [int(x) for x in args.counts.split(",")]
    t0 = time.perf_counter()
    rows = []
    for preset in args.presets.split(","):
        for kind in kinds:
            ks = [t for t in tasks if t.kind == kind]
            arms = [Arm(str(c), [run(eng, t, make_policy(preset), alternatives=c) for t in ks]) for c in counts]
            base_p50 = statistics.median([o.ms for o in arms[0].outcomes]) if ks else 0.0
            for arm in arms:
                n = max(1, len(arm.outcomes))
                ms = [o.ms for o in arm.outcomes]
                p50 = statistics.median(ms) if ms else 0.0
                row = {"preset": preset, "kind": kind, "alternatives": int(arm.label), "n": len(arm.outcomes),
                       **arm.summary(), "empty": sum(o.parse is None for o in arm.outcomes) / n,
                       "p50_ms": p50, "p95_ms": pct(ms, 0.95), "p50_vs_base": p50 / base_p50 if base_p50 else 0.0}
                if arm is not arms[0]:
                    row |= paired(arms[0], arm)
                rows.append(row)
    report("alternatives", eng.info()["model"], len(tasks), t0,
           f"{'preset':8} {'kind':11} {'alt':>3} {'TPF':>5} {'EM':>5} {'ES':>5} {'parse':>5} {'empty':>5} "
           f"{'p50ms':>6} {'p95ms':>6} {'x p50':>5}", rows,
           lambda r: f"{r['preset']:8} {r['kind']:11} {r['alternatives']:3d} {r['tpf']:5.2f} "
                     f"{r['exact_match']:5.2f} {r['edit_sim']:5.2f} {r['parse_ok']:5.2f} {r['empty']:5.2f} "
                     f"{r['p50_ms']:6.0f} {r['p95_ms']:6.0f} {r['p50_vs_base']:5.2f}")


if __name__ == "__main__":
    main()
