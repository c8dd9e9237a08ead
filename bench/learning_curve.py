"""Learning curve of a training chain: held-out single-line exact match against tokens seen.

    python bench/learning_curve.py RUN_DIR [RUN_DIR ...] [--per-kind N] [--seed S]
                                   [--preset quality] [--every K] [--plot out.png]

Evaluates the checkpoints of each RUN_DIR on the same held-out single-line tasks
(`bench/tasks.make_tasks(per_kind, seed)`; `--per-kind 400 --seed 0` are the tasks of `python
bench/decode.py --per-kind 400`), decoded as the product decodes them (`bench.decode.run_one`:
the preset as shipped, scored on the candidate the language server would show). Tokens seen
and held-out losses come from the run's log (`log.jsonl`, or `train_log.jsonl` as the GPU
session names it). A run's checkpoints are its `snap-*` directories, or, with none, the run
directory itself when it holds weights (a device run returns its final weights only).
Several runs are one chain: a run started with `--init-from` the previous one's final
checkpoint continues its step and token counts. Prints a table (exact match with its 95%
Wilson interval) and ends with one JSON line.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.decode import run_one, wilson  # noqa: E402
from bench.tasks import edit_similarity, exact_match, make_tasks  # noqa: E402

LOG_NAMES = ("log.jsonl", "train_log.jsonl")


def run_log(run: Path) -> list[dict]:
    """The run's log records, the first of `LOG_NAMES` that exists."""
    for name in LOG_NAMES:
        path = run / name
        if path.is_file():
            return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    raise SystemExit(f"{run}: no {' or '.join(LOG_NAMES)}")


def checkpoints(run: Path, records: list[dict], every: int) -> list[tuple[int, Path]]:
    """(step, directory) of the run's checkpoints to evaluate: every k-th snapshot and the
    last; a run without snapshots is its own final checkpoint."""
    snaps = sorted(run.glob("snap-*"))
    if not snaps:
        if not (run / "model.safetensors").is_file():
            raise SystemExit(f"{run}: no snap-* directories and no model.safetensors")
        return [(records[-1]["step"], run)]
    chosen = snaps[::every] + ([snaps[-1]] if (len(snaps) - 1) % every else [])
    return [(int(s.name.split("-")[1]), s) for s in chosen]


def plot(curve: list[dict], log: list[dict], preset: str, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 2, figsize=(10, 4))
    xs = [c["tokens"] / 1e6 for c in curve]
    ax[0].errorbar(xs, [c["exact_match"] for c in curve],
                   yerr=[[c["exact_match"] - c["em_ci"][0] for c in curve],
                         [c["em_ci"][1] - c["exact_match"] for c in curve]], fmt="o-", capsize=3,
                   label="exact match (95% CI)")
    ax[0].plot(xs, [c["edit_sim"] for c in curve], "s-", label="edit similarity")
    ax[0].set_xscale("log")
    ax[0].set_xlabel("tokens seen (M)")
    ax[0].set_title(f"held-out single line ({preset}, {curve[0]['tasks']} tasks)")
    ax[0].legend()
    held = [r for r in log if r.get("held_ar") is not None]
    ax[1].plot([r["tokens"] / 1e6 for r in held], [r["held_ar"] for r in held], ".-", label="held-out AR loss")
    diff = [r for r in held if r.get("held_diff") is not None]
    ax[1].plot([r["tokens"] / 1e6 for r in diff], [r["held_diff"] for r in diff], ".-",
               label="held-out diffusion loss")
    ax[1].set_xscale("log")
    ax[1].set_xlabel("tokens seen (M)")
    ax[1].legend()
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", type=Path, nargs="+")
    ap.add_argument("--per-kind", "--tasks", dest="per_kind", type=int, default=40,
                    help="tasks drawn per kind (the single-line ones are evaluated)")
    ap.add_argument("--seed", type=int, default=1, help="task seed (bench/decode.py uses 0)")
    ap.add_argument("--preset", default="quality")
    ap.add_argument("--every", type=int, default=1, help="evaluate every k-th snapshot")
    ap.add_argument("--plot", default="")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--offset-steps", type=int, default=0, help="steps of earlier runs of the chain "
                    "that are not given (their directories are gone; the model card lists them)")
    ap.add_argument("--offset-tokens", type=float, default=0.0, help="their tokens, e.g. 21.73e6")
    args = ap.parse_args()
    from engine.service import TextEngine

    tasks = [t for t in make_tasks(args.per_kind, args.seed) if t.kind == "single_line"]
    log: list[dict] = []
    curve = []
    step0, tokens0 = args.offset_steps, int(args.offset_tokens)
    for run in args.runs:
        records = run_log(run)
        log += [r | {"step": r["step"] + step0, "tokens": r["tokens"] + tokens0} for r in records]
        by_step = {r["step"]: r for r in records}
        for step, ckpt in checkpoints(run, records, args.every):
            eng = TextEngine(ckpt, threads=args.threads)
            texts = [run_one(eng, t, args.preset, {})[0] for t in tasks]
            hits = sum(exact_match(x, t.middle) for x, t in zip(texts, tasks, strict=True))
            rec = by_step.get(step, {})
            point = {"run": run.name, "checkpoint": str(ckpt), "step": step + step0,
                     "tokens": rec.get("tokens", 0) + tokens0, "held_ar": rec.get("held_ar"),
                     "held_diff": rec.get("held_diff"), "tasks": len(tasks), "exact_match": hits / len(tasks),
                     "em_ci": [round(x, 3) for x in wilson(hits, len(tasks))],
                     "edit_sim": sum(edit_similarity(x, t.middle) for x, t in zip(texts, tasks, strict=True))
                     / len(tasks)}
            curve.append(point)
            print(f"{run.name:>10} step {point['step']:6d} tokens {point['tokens'] / 1e6:7.2f}M "
                  f"held_ar {point['held_ar']} held_diff {point['held_diff']} EM {point['exact_match']:.3f} "
                  f"({point['em_ci'][0]:.3f}-{point['em_ci'][1]:.3f}) ES {point['edit_sim']:.3f}", flush=True)
        step0, tokens0 = step0 + records[-1]["step"], tokens0 + records[-1]["tokens"]
    if args.plot and curve:
        plot(curve, log, args.preset, args.plot)
    print(json.dumps({"bench": "learning_curve", "runs": [str(r) for r in args.runs], "preset": args.preset,
                      "seed": args.seed, "tasks": len(tasks), "curve": curve}))


if __name__ == "__main__":
    main()
