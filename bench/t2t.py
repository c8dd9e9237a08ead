"""Does T2T editing help? Draft-then-edit against the same mask threshold without edits.

    python bench/t2t.py [--model DIR] [--per-kind N] [--taus 0.1,0.2,0.3,0.5] [--edits 0.5,0.8]

For each mask threshold tau, on the same held-out infill tasks: `threshold` (Fast-dLLM's rule
at tau, speedy's leftmost fallback, no edits) against `draft_edit` at tau with each edit
threshold (speedy's edit passes). A low tau commits many tokens a step, which is where the
parallel draft makes the mistakes edits exist to fix. Per pair: TPF, exact match, edit
similarity and parse validity of both, and the paired comparison over tasks: how many
outputs differ, exact-match wins and losses, edit-similarity wins and losses with the
two-sided sign-test p-value. Prints a table and ends with one JSON line.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.tasks import KINDS, Task, edit_similarity, exact_match, make_tasks, parses  # noqa: E402
from engine.api import CompletionRequest, EngineEvent  # noqa: E402


@dataclass
class Outcome:
    text: str
    tokens: int
    forwards: int
    em: bool
    es: float
    parse: bool | None  # None: empty
    ms: float = 0.0  # the request's wall time, done event included


@dataclass
class Arm:
    label: str
    outcomes: list[Outcome] = field(default_factory=list)

    def summary(self) -> dict[str, float]:
        n = max(1, len(self.outcomes))
        parsed = [o.parse for o in self.outcomes if o.parse is not None]
        return {"tpf": sum(o.tokens for o in self.outcomes) / max(1, sum(o.forwards for o in self.outcomes)),
                "exact_match": sum(o.em for o in self.outcomes) / n,
                "edit_sim": sum(o.es for o in self.outcomes) / n,
                "parse_ok": sum(parsed) / len(parsed) if parsed else 0.0}


def sign_test(wins: int, losses: int) -> float:
    """Two-sided exact binomial p-value of wins against losses (ties dropped)."""
    n = wins + losses
    if n == 0:
        return 1.0
    k = min(wins, losses)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2**n
    return min(1.0, 2 * tail)


def paired(base: Arm, other: Arm) -> dict[str, float]:
    pairs = list(zip(base.outcomes, other.outcomes, strict=True))
    es_w = sum(o.es > b.es + 1e-9 for b, o in pairs)
    es_l = sum(o.es < b.es - 1e-9 for b, o in pairs)
    return {"differ": sum(b.text != o.text for b, o in pairs),
            "em_wins": sum(o.em and not b.em for b, o in pairs), "em_losses": sum(b.em and not o.em for b, o in pairs),
            "es_wins": es_w, "es_losses": es_l, "es_sign_p": sign_test(es_w, es_l)}


PAIRED_HEADER = f"{'differ':>6} {'EM +/-':>7} {'ES +/-':>7} {'sign p':>6}"


def print_table(head: str, rows: list[dict], cells) -> None:  # noqa: ANN001 - cells: row -> str
    """A table with the paired columns (blank on the baseline rows) after each row's cells."""
    hdr = f"{head} {PAIRED_HEADER}"
    print(hdr)
    print("-" * len(hdr))
    for r in rows:
        extra = (f"{r['differ']:6d} {r['em_wins']:3d}/{r['em_losses']:<3d} {r['es_wins']:3d}/{r['es_losses']:<3d} "
                 f"{r['es_sign_p']:6.3f}") if "differ" in r else ""
        print(f"{cells(r)} {extra}")


def chosen(task: Task, done: EngineEvent) -> str:
    """The candidate the language server would show: the first of the primary and its
    alternatives that adds no parse error (llada_lsp.postprocess.first_fitting)."""
    cands = [done.text, *done.alternatives]
    if len(cands) == 1:
        return done.text
    from llada_lsp.postprocess import first_fitting
    from llada_lsp.syntax import adds_error

    return cands[first_fitting(cands, lambda t: adds_error("python", None, task.prefix, t, task.suffix))]


def run(eng, task: Task, policy, alternatives: int = 1) -> Outcome:  # noqa: ANN001
    """Decode `task` with `policy` (the prompt cache cleared); `alternatives` candidates, the
    shown one chosen as the server does. Forwards count the whole group's."""
    eng.prompt_cache.clear()
    plan = replace(task.plan, alternatives=alternatives)
    done = list(eng.complete(CompletionRequest("t2t", "t2t", task.prefix, task.suffix, plan), policy=policy))[-1]
    st = done.stats or {}
    text = chosen(task, done)
    return Outcome(text, int(st.get("tokens", 0)), int(st.get("forwards", 0)),
                   exact_match(text, task.middle), edit_similarity(text, task.middle),
                   parses(task.prefix + text + task.suffix) if text.strip() else None, float(st.get("total_ms", 0.0)))


def report(bench: str, model: str, n_tasks: int, t0: float, head: str, rows: list[dict], cells) -> None:  # noqa: ANN001
    """A paired bench's output: the run's line, its table, then the final JSON line."""
    print(f"model {model}, {n_tasks} tasks, {time.perf_counter() - t0:.0f} s")
    print_table(head, rows, cells)
    print(json.dumps({"bench": bench, "model": model, "tasks": n_tasks,
                      "rows": [{k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items()} for r in rows]}))


def task_args(ap: argparse.ArgumentParser, per_kind: int) -> None:
    """The options every paired task bench shares."""
    ap.add_argument("--model", default=None)
    ap.add_argument("--per-kind", type=int, default=per_kind)
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu", help="cpu | cuda (bfloat16 there, as the loader defaults)")


def engine_and_tasks(args: argparse.Namespace):  # noqa: ANN201 - (TextEngine, kinds, tasks)
    from engine.service import TextEngine

    kinds = [k for k in KINDS if k in args.kinds.split(",")]
    tasks = [t for t in make_tasks(args.per_kind, args.seed) if t.kind in kinds]
    return TextEngine(args.model, threads=args.threads, device=args.device), kinds, tasks


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    task_args(ap, 40)
    ap.add_argument("--taus", default="0.1,0.2,0.3,0.5", help="mask thresholds")
    ap.add_argument("--edits", default="0.5,0.8", help="edit thresholds of draft_edit")
    ap.add_argument("--multi-block", action="store_true", help="add the arm of the first edit threshold with "
                    "multi-block edit passes (the speedy_multi preset's rule)")
    args = ap.parse_args()
    from engine.decoding.policies import PRESETS, make_policy

    eng, kinds, tasks = engine_and_tasks(args)
    fallback = PRESETS["speedy"][1].fallback
    taus = [float(x) for x in args.taus.split(",")]
    edits = [float(x) for x in args.edits.split(",")]
    t0 = time.perf_counter()
    results = []
    for tau in taus:
        arms = [("threshold", make_policy("threshold", threshold=tau, fallback=fallback))]
        # the loop guard off: the pair differs in edits alone (bench/loops.py measures the guard)
        arms += [(f"draft_edit e={e}", make_policy("speedy", mask_threshold=tau, edit_threshold=e, loop_repeats=0))
                 for e in edits]
        if args.multi_block:
            arms.append((f"draft_edit e={edits[0]} multi", make_policy("speedy_multi", mask_threshold=tau,
                                                                        edit_threshold=edits[0], loop_repeats=0)))
        by_kind: dict[str, list[Arm]] = {}
        for kind in kinds:
            ks = [t for t in tasks if t.kind == kind]
            by_kind[kind] = [Arm(lab, [run(eng, t, pol) for t in ks]) for lab, pol in arms]
        for kind in [*kinds, "all"]:
            arm_list = by_kind[kind] if kind != "all" else [
                Arm(a.label, [o for k in kinds for o in by_kind[k][i].outcomes]) for i, a in enumerate(by_kind[kinds[0]])]
            base = arm_list[0]
            for arm in arm_list:
                row = {"tau": tau, "kind": kind, "policy": arm.label, "n": len(arm.outcomes), **arm.summary()}
                if arm is not base:
                    row |= paired(base, arm)
                results.append(row)
    report("t2t", eng.info()["model"], len(tasks), t0,
           f"{'tau':>4} {'kind':11} {'policy':16} {'TPF':>5} {'EM':>5} {'ES':>5} {'parse':>5}", results,
           lambda r: f"{r['tau']:4.2f} {r['kind']:11} {r['policy']:16} {r['tpf']:5.2f} {r['exact_match']:5.2f} "
                     f"{r['edit_sim']:5.2f} {r['parse_ok']:5.2f}")


if __name__ == "__main__":
    main()
