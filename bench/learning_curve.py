"""Learning curve of a training run: held-out single-line exact match against tokens seen.

    python bench/learning_curve.py RUN_DIR [RUN_DIR ...] [--tasks N] [--preset quality] [--plot out.png]

Evaluates every `snap-*` checkpoint of each RUN_DIR on the same held-out single-line tasks
(bench/tasks.py) and reads tokens seen and held-out losses from RUN_DIR/log.jsonl. Several
runs are one chain: a run started with `--init-from` the previous one's final checkpoint
continues its step and token counts. Prints a table and ends with one JSON line.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.tasks import edit_similarity, exact_match, make_tasks  # noqa: E402
from engine.api import CompletionRequest  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("runs", type=Path, nargs="+")
    ap.add_argument("--tasks", type=int, default=40)
    ap.add_argument("--preset", default="quality")
    ap.add_argument("--every", type=int, default=1, help="evaluate every k-th snapshot")
    ap.add_argument("--plot", default="")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--offset-steps", type=int, default=0, help="steps of earlier runs of the chain "
                    "that are not given (their directories are gone; the model card lists them)")
    ap.add_argument("--offset-tokens", type=float, default=0.0, help="their tokens, e.g. 21.73e6")
    args = ap.parse_args()
    from engine.service import TextEngine

    tasks = [t for t in make_tasks(args.tasks, seed=1) if t.kind == "single_line"]
    log: list[dict] = []
    curve = []
    step0, tokens0 = args.offset_steps, int(args.offset_tokens)
    for run in args.runs:
        run_log = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines() if line.strip()]
        for r in run_log:
            log.append(r | {"step": r["step"] + step0, "tokens": r["tokens"] + tokens0})
        by_step = {r["step"]: r for r in run_log}
        snaps = sorted(run.glob("snap-*"))
        chosen = snaps[:: args.every] + ([snaps[-1]] if snaps and (len(snaps) - 1) % args.every else [])
        for snap in chosen:
            step = int(snap.name.split("-")[1])
            eng = TextEngine(snap, threads=args.threads)
            em = es = 0.0
            for t in tasks:
                eng.prompt_cache.clear()
                req = CompletionRequest("lc", "lc", t.prefix, t.suffix, replace(t.plan, preset=args.preset))
                text = list(eng.complete(req))[-1].text
                em += exact_match(text, t.middle)
                es += edit_similarity(text, t.middle)
            rec = by_step.get(step, {})
            point = {"run": run.name, "step": step + step0, "tokens": rec.get("tokens", 0) + tokens0,
                     "held_ar": rec.get("held_ar"), "held_diff": rec.get("held_diff"),
                     "exact_match": em / len(tasks), "edit_sim": es / len(tasks)}
            curve.append(point)
            print(f"{run.name:>10} step {point['step']:6d} tokens {point['tokens'] / 1e6:6.2f}M "
                  f"held_ar {point['held_ar']} held_diff {point['held_diff']} "
                  f"EM {point['exact_match']:.3f} ES {point['edit_sim']:.3f}", flush=True)
        step0, tokens0 = step0 + run_log[-1]["step"], tokens0 + run_log[-1]["tokens"]
    if args.plot and curve:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(1, 2, figsize=(10, 4))
        xs = [(c["tokens"] or 0) / 1e6 for c in curve]
        ax[0].plot(xs, [c["exact_match"] for c in curve], "o-", label="exact match")
        ax[0].plot(xs, [c["edit_sim"] for c in curve], "s-", label="edit similarity")
        ax[0].set_xlabel("tokens seen (M)")
        ax[0].set_title(f"held-out single-line ({args.preset})")
        ax[0].legend()
        steps = [r for r in log if "held_ar" in r]
        ax[1].plot([r["tokens"] / 1e6 for r in steps], [r["held_ar"] for r in steps], label="held-out AR loss")
        ax[1].plot([r["tokens"] / 1e6 for r in steps if r["held_diff"]],
                   [r["held_diff"] for r in steps if r["held_diff"]], label="held-out diffusion loss")
        ax[1].set_xlabel("tokens seen (M)")
        ax[1].legend()
        fig.tight_layout()
        Path(args.plot).parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(args.plot, dpi=110)
    print(json.dumps({"runs": [str(r) for r in args.runs], "preset": args.preset, "tasks": len(tasks), "curve": curve}))


if __name__ == "__main__":
    main()
