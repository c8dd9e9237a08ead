"""Decode benchmark: every policy and preset on held-out infill tasks, in one run.

    python bench/decode.py [--quick] [--model DIR] [--per-kind N] [--plot out.png] [--repair]

Per kind (single_line, multi_line, block) and policy: forwards per completion, tokens per
forward (TPF), p50/p95 latency, exact match (with its 95% Wilson interval: at 24 tasks one
task moves it by 4 points), edit similarity, parse validity and empty share, with the latency
ratio against `one_per_step` from the same run. Prints a table and ends with one JSON line.
The prompt cache is cleared before every completion (this measures decoding). Presets run as
shipped: `quality` decodes its alternatives (engine.decoding.alternatives) and is scored on the
candidate the language server would show. Forwards are the done event's `stats.forwards`: every
model forward the request caused (alternatives that outlast the primary and repair passes
included), and TPF is the primary's tokens over them; latency is the whole group's.

`--repair` adds a `quality+repair` row: the quality preset followed by the language server's
syntax repair (the tokens of an added parse error re-masked, up to two engine passes, then
the text trimmed to the longest line prefix that parses, or dropped), i.e. what an editor
would be offered, without the server's other post-processing.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.ab import chosen  # noqa: E402
from bench.tasks import KINDS, Task, edit_similarity, exact_match, make_tasks, parses  # noqa: E402
from engine.api import CompletionRequest, EngineEvent  # noqa: E402

# (label, preset or policy, overrides)
POLICIES: list[tuple[str, str, dict[str, object]]] = [
    ("one_per_step", "one_per_step", {}),
    ("low_confidence", "low_confidence", {}),
    ("threshold", "threshold", {}),
    ("threshold@speedy", "threshold", {"__speedy_tau__": True}),
    ("speedy", "speedy", {}),  # as shipped: on the native model with context agreement (engine.decoding.lookup)
    ("quality", "quality", {}),
    ("speedy-agree", "speedy", {"context_agreement": 0}),  # Speedy's published rule, without it
    ("quality+agree", "quality", {"context_agreement": 8}),  # Quality does not ship with it
]
REPAIR = "__repair__"
REPAIR_PASSES = 2  # the language server's default `syntax_remask_passes`


def pct(xs: list[float], q: float) -> float:
    if not xs:
        return 0.0
    s = sorted(xs)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval of a proportion k/n."""
    if n == 0:
        return 0.0, 0.0
    p = k / n
    mid = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, mid - half), min(1.0, mid + half)


def repair(eng, task: Task, text: str, stats: dict, passes: int = REPAIR_PASSES) -> str:  # noqa: ANN001
    """The language server's syntax repair of `text` (llada_lsp.completion.completions.settle): remask
    the spans of an added parse error while that may help, then trim. The remasks' time is
    added to `stats`; its `forwards` is the request's running total (the first pass, its
    alternatives and every remask)."""
    from llada_lsp.completion.postprocess import remask_can_help, syntax_trim
    from llada_lsp.text.syntax import adds_error, error_spans

    t0, previous = time.perf_counter(), None
    for _ in range(passes):
        spans = error_spans("python", None, task.prefix, text, task.suffix)
        if not spans or not remask_can_help(text, spans, previous):
            break
        done = list(eng.remask("bench", spans))[-1]
        previous, text = text, done.text
        stats["forwards"] = (done.stats or {}).get("forwards", stats.get("forwards", 0))
    text = syntax_trim(text, lambda t: adds_error("python", None, task.prefix, t, task.suffix))[0]
    stats["total_ms"] = stats.get("total_ms", 0.0) + (time.perf_counter() - t0) * 1000
    return text


def run_one(eng, task: Task, preset: str, overrides: dict[str, object]) -> tuple[str, dict]:  # noqa: ANN001
    from dataclasses import replace

    from engine.decoding.policies import make_policy

    eng.prompt_cache.clear()
    plan = replace(task.plan, preset=preset)
    req = CompletionRequest("bench", "bench", task.prefix, task.suffix, plan)
    policy = make_policy(preset, **overrides) if overrides and not overrides.get(REPAIR) else None
    evs: list[EngineEvent] = list(eng.complete(req, policy=policy))
    done = evs[-1]
    stats = dict(done.stats or {})
    # stats.forwards: every forward the request caused, its alternatives' included
    text = chosen(task, done)
    if overrides.get(REPAIR):  # a remask re-decodes the primary only
        text = repair(eng, task, text, stats, REPAIR_PASSES if text == done.text else 0)
    return text, stats


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", default=None)
    ap.add_argument("--quick", action="store_true", help="a fixed subset: 8 tasks per kind")
    ap.add_argument("--per-kind", type=int, default=40)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--plot", default="bench/out/decode.png")
    ap.add_argument("--policies", default="", help="comma-separated labels (default: all)")
    ap.add_argument("--repair", action="store_true", help="add quality + the server's syntax repair")
    ap.add_argument("--kinds", default=",".join(KINDS), help="comma-separated task kinds")
    args = ap.parse_args()
    from engine.decoding.policies import PRESETS
    from engine.service import TextEngine

    eng = TextEngine(args.model, threads=args.threads)
    per_kind = 8 if args.quick else args.per_kind
    kinds = [k for k in KINDS if k in args.kinds.split(",")]
    tasks = [t for t in make_tasks(per_kind, args.seed) if t.kind in kinds]
    speedy_tau = PRESETS["speedy"][1].mask_threshold
    wanted = set(filter(None, args.policies.split(",")))
    speedy_fb = PRESETS["speedy"][1].fallback
    pols = [(lab, name, ({"threshold": speedy_tau, "fallback": speedy_fb} if ov.get("__speedy_tau__") else ov))
            for lab, name, ov in POLICIES if not wanted or lab in wanted or lab == "one_per_step"]
    if args.repair:
        pols.append(("quality+repair", "quality", {REPAIR: True}))
    rows: dict[str, dict[str, dict[str, float]]] = {k: {} for k in kinds}
    t_start = time.perf_counter()
    for lab, name, ov in pols:
        for kind in kinds:
            ks = [t for t in tasks if t.kind == kind]
            lat, fw, toks, em, es, ok, empty = [], [], [], [], [], [], 0
            for t in ks:
                text, st = run_one(eng, t, name, ov)
                lat.append(st.get("total_ms", 0.0))
                fw.append(st.get("forwards", 0))
                toks.append(st.get("tokens", 0))
                em.append(exact_match(text, t.middle))
                es.append(edit_similarity(text, t.middle))
                if text.strip():
                    ok.append(parses(t.prefix + text + t.suffix))
                else:
                    empty += 1
            n = max(1, len(ks))
            rows[kind][lab] = {
                "tpf": sum(toks) / max(1, sum(fw)), "forwards": sum(fw) / n,
                "p50_ms": statistics.median(lat) if lat else 0.0, "p95_ms": pct(lat, 0.95),
                "mean_ms": sum(lat) / n, "exact_match": sum(em) / n, "edit_sim": sum(es) / n,
                "em_lo": wilson(sum(em), len(ks))[0], "em_hi": wilson(sum(em), len(ks))[1],
                "parse_ok": (sum(ok) / len(ok)) if ok else 0.0, "empty": empty / n,
            }
    for kind in kinds:
        base = rows[kind]["one_per_step"]
        for r in rows[kind].values():
            r["speedup_vs_one_per_step"] = base["mean_ms"] / r["mean_ms"] if r["mean_ms"] else 0.0
            r["forwards_ratio_vs_one_per_step"] = base["forwards"] / r["forwards"] if r["forwards"] else 0.0
    info = eng.info()
    print(f"model {info['model']} ({info['params'] / 1e6:.1f}M params, block {info['block_size']}), "
          f"{len(tasks)} tasks, {time.perf_counter() - t_start:.0f} s")
    hdr = f"{'kind':12} {'policy':17} {'TPF':>5} {'fwd':>6} {'p50ms':>7} {'p95ms':>7} {'EM':>5} {'EM 95% CI':>11} {'ES':>5} {'parse':>5} {'empty':>5} {'speedup':>7}"
    print(hdr)
    print("-" * len(hdr))
    for kind in kinds:
        for lab, r in rows[kind].items():
            print(f"{kind:12} {lab:17} {r['tpf']:5.2f} {r['forwards']:6.1f} {r['p50_ms']:7.1f} {r['p95_ms']:7.1f} "
                  f"{r['exact_match']:5.2f} {r['em_lo']:5.2f}-{r['em_hi']:5.2f} {r['edit_sim']:5.2f} {r['parse_ok']:5.2f} {r['empty']:5.2f} "
                  f"{r['speedup_vs_one_per_step']:7.2f}")
    if args.plot:
        plot(rows, Path(args.plot))
    out = {"model": info["model"], "tasks": len(tasks),
           "kinds": {k: {lab: {m: round(v, 4) for m, v in r.items()} for lab, r in rows[k].items()} for k in kinds}}
    print(json.dumps(out))


def plot(rows: dict[str, dict[str, dict[str, float]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    fig, axes = plt.subplots(1, len(rows), figsize=(5 * len(rows), 4), squeeze=False)
    for ax, (kind, pol) in zip(axes[0], rows.items(), strict=True):
        for lab, r in pol.items():
            ax.scatter(r["tpf"], r["exact_match"], s=40)
            ax.annotate(lab, (r["tpf"], r["exact_match"]), fontsize=8, xytext=(3, 3), textcoords="offset points")
        ax.set_title(kind)
        ax.set_xlabel("tokens per forward")
        ax.set_ylabel("exact match")
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
