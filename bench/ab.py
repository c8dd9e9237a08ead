"""The A/B harness of the decoding benches: arms as data, paired over the same held-out tasks.

An `Arm` is a name plus everything it decodes with (the preset, policy overrides, the number
of alternatives, the checkpoint); a `Group` is a list of arms compared against its first (the
baseline) on one set of tasks. `compare` warms each engine with one untimed decode, then runs
every group's arms in alternated rounds (the order reversed on odd rounds, so the machine's
drift lands on every arm alike), scores the
text the language server would show (`chosen`), and returns one row per arm: TPF (tokens over
every forward the request caused), exact match, edit similarity, parse validity of the
non-empty results, the empty share, mean length, p50/p95 latency (each task's median over
the rounds) and the p50 ratio to the baseline with a paired bootstrap 95% interval; against
the baseline, the paired columns (outputs that differ, EM and ES wins/losses, sign-test p).
`report` prints the table and ends with one JSON line. Arm sets: bench/ab_sets.py (settled
questions) and bench/compare_models.py. Arms pass their settings explicitly: nothing global
is changed while a bench runs.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.tasks import KINDS, Task, edit_similarity, exact_match, make_tasks, parses  # noqa: E402
from engine.api import CompletionRequest, EngineEvent  # noqa: E402

R = TypeVar("R")


@dataclass(frozen=True)
class Arm:
    """One arm: its name, and what it decodes with. `settings` are shown in the arm's row."""

    name: str
    preset: str = "speedy"
    policy: dict[str, Any] = field(default_factory=dict)  # make_policy overrides
    alternatives: int = 1
    model: str | None = None  # checkpoint directory; None: the bench's `--model`
    settings: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Group:
    """Arms compared against the first, on `tasks`; `keys` label the group's rows."""

    keys: dict[str, Any]
    arms: Sequence[Arm]
    tasks: Sequence[Task]


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
class Scored:
    """An arm's outcomes, one per task, in the group's task order."""

    label: str
    outcomes: list[Outcome] = field(default_factory=list)

    def summary(self) -> dict[str, float]:
        n = max(1, len(self.outcomes))
        parsed = [o.parse for o in self.outcomes if o.parse is not None]
        ms = [o.ms for o in self.outcomes]
        return {"tpf": sum(o.tokens for o in self.outcomes) / max(1, sum(o.forwards for o in self.outcomes)),
                "exact_match": sum(o.em for o in self.outcomes) / n,
                "edit_sim": sum(o.es for o in self.outcomes) / n,
                "parse_ok": sum(parsed) / len(parsed) if parsed else 0.0,
                "empty": sum(o.parse is None for o in self.outcomes) / n,
                "mean_chars": sum(len(o.text) for o in self.outcomes) / n,
                "p50_ms": statistics.median(ms) if ms else 0.0, "p95_ms": pct(ms, 0.95)}


def pct(xs: Sequence[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))] if s else 0.0


def sign_test(wins: int, losses: int) -> float:
    """Two-sided exact binomial p-value of wins against losses (ties dropped)."""
    n = wins + losses
    if n == 0:
        return 1.0
    k = min(wins, losses)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2**n
    return min(1.0, 2 * tail)


def paired(base: Scored, other: Scored) -> dict[str, float]:
    pairs = list(zip(base.outcomes, other.outcomes, strict=True))
    es_w = sum(o.es > b.es + 1e-9 for b, o in pairs)
    es_l = sum(o.es < b.es - 1e-9 for b, o in pairs)
    return {"differ": sum(b.text != o.text for b, o in pairs),
            "em_wins": sum(o.em and not b.em for b, o in pairs), "em_losses": sum(b.em and not o.em for b, o in pairs),
            "es_wins": es_w, "es_losses": es_l, "es_sign_p": sign_test(es_w, es_l)}


def ratio_interval(base: Sequence[float], other: Sequence[float], resamples: int = 1000,
                   seed: int = 0) -> tuple[float, float]:
    """A paired bootstrap 95% interval of median(other) / median(base) over the same tasks."""
    n = len(base)
    if n == 0 or len(other) != n:
        return (0.0, 0.0)
    rng = random.Random(seed)
    ratios = []
    for _ in range(resamples):
        idx = [rng.randrange(n) for _ in range(n)]
        b = statistics.median(base[i] for i in idx)
        ratios.append(statistics.median(other[i] for i in idx) / b if b else 0.0)
    ratios.sort()
    return ratios[int(0.025 * resamples)], ratios[min(resamples - 1, int(0.975 * resamples))]


def alternated(n_arms: int, rounds: int, run_arm: Callable[[int], R]) -> list[list[R]]:
    """`run_arm(i)` for every arm, `rounds` times, the order reversed on odd rounds (the
    machine's drift lands on every arm alike); each arm's results, one per round."""
    out: list[list[R]] = [[] for _ in range(n_arms)]
    for r in range(rounds):
        for i in range(n_arms) if r % 2 == 0 else reversed(range(n_arms)):
            out[i].append(run_arm(i))
    return out


def chosen(task: Task, done: EngineEvent) -> str:
    """The candidate the language server would show: the first of the primary and its
    alternatives that adds no parse error (llada_lsp.completion.postprocess.first_fitting)."""
    cands = [done.text, *done.alternatives]
    if len(cands) == 1:
        return done.text
    from llada_lsp.completion.postprocess import first_fitting
    from llada_lsp.text.syntax import adds_error

    return cands[first_fitting(cands, lambda t: adds_error("python", None, task.prefix, t, task.suffix))]


def run(eng: Any, task: Task, policy: Any, alternatives: int = 1) -> Outcome:
    """Decode `task` with `policy` (the prompt cache cleared); `alternatives` candidates, the
    shown one chosen as the server does. Forwards count the whole group's."""
    eng.prompt_cache.clear()
    plan = replace(task.plan, alternatives=alternatives)
    done = list(eng.complete(CompletionRequest("ab", "ab", task.prefix, task.suffix, plan), policy=policy))[-1]
    st = done.stats or {}
    text = chosen(task, done)
    return Outcome(text, int(st.get("tokens", 0)), int(st.get("forwards", 0)),
                   exact_match(text, task.middle), edit_similarity(text, task.middle),
                   parses(task.prefix + text + task.suffix) if text.strip() else None, float(st.get("total_ms", 0.0)))


def compare(groups: Sequence[Group], engine: Callable[[str | None], Any], rounds: int = 1) -> list[dict[str, Any]]:
    """Every group's arms over its tasks, `rounds` times alternated; one row per arm."""
    from engine.decoding.policies import make_policy

    rows: list[dict[str, Any]] = []
    warm: set[int] = set()
    for g in groups:
        for a in g.arms:  # one untimed decode per engine first: its ops' first-call set-up
            eng = engine(a.model)
            if id(eng) not in warm and g.tasks:
                warm.add(id(eng))
                run(eng, g.tasks[0], make_policy(a.preset, **a.policy), a.alternatives)

        def run_arm(i: int, g: Group = g) -> list[Outcome]:
            a = g.arms[i]
            eng, policy = engine(a.model), make_policy(a.preset, **a.policy)
            return [run(eng, t, policy, a.alternatives) for t in g.tasks]

        runs = alternated(len(g.arms), rounds, run_arm)
        scored = []
        for i, a in enumerate(g.arms):  # texts are deterministic; each task's latency: its median
            per_task = list(zip(*runs[i], strict=True))  # each task's outcomes, one per round
            scored.append(Scored(a.name, [replace(rs[0], ms=statistics.median(o.ms for o in rs)) for rs in per_task]))
        base = scored[0]
        for a, s in zip(g.arms, scored, strict=True):
            row = {**g.keys, "arm": a.name, **a.settings, "n": len(s.outcomes), **s.summary()}
            b50 = base.summary()["p50_ms"]
            row["p50_vs_base"] = row["p50_ms"] / b50 if b50 else 0.0
            if s is not base:
                lo, hi = ratio_interval([o.ms for o in base.outcomes], [o.ms for o in s.outcomes])
                row |= {"p50_vs_base_lo": lo, "p50_vs_base_hi": hi} | paired(base, s)
            rows.append(row)
    return rows


def report(bench: str, info: dict[str, Any], n_tasks: int, rounds: int, t0: float, keys: Sequence[str],
           rows: list[dict[str, Any]]) -> None:
    """The table (the group's `keys`, the arm, its figures, the paired columns on non-baseline
    rows), then the final JSON line."""
    print(f"{bench}: {', '.join(f'{k} {v}' for k, v in info.items())}, {n_tasks} tasks, {rounds} round(s), "
          f"{time.perf_counter() - t0:.0f} s")
    head = "".join(f"{k:12}" for k in keys) + f"{'arm':24} {'TPF':>5} {'EM':>5} {'ES':>5} {'parse':>5} {'empty':>5} " \
        f"{'p50ms':>6} {'x p50 (95%)':>17} {'differ':>6} {'EM +/-':>7} {'ES +/-':>7} {'sign p':>6}"
    print(head)
    print("-" * len(head))
    for r in rows:
        cells = "".join(f"{str(r[k]):12}" for k in keys) + (
            f"{r['arm']:24} {r['tpf']:5.2f} {r['exact_match']:5.2f} {r['edit_sim']:5.2f} {r['parse_ok']:5.2f} "
            f"{r['empty']:5.2f} {r['p50_ms']:6.0f}")
        if "differ" in r:
            cells += (f" {r['p50_vs_base']:5.2f} ({r['p50_vs_base_lo']:4.2f}-{r['p50_vs_base_hi']:4.2f}) "
                      f"{r['differ']:6d} {r['em_wins']:3d}/{r['em_losses']:<3d} {r['es_wins']:3d}/{r['es_losses']:<3d} "
                      f"{r['es_sign_p']:6.3f}")
        print(cells)
    print(json.dumps({"bench": bench, **info, "tasks": n_tasks, "rounds": rounds,
                      "rows": [{k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items()} for r in rows]}))


def task_args(ap: argparse.ArgumentParser, per_kind: int) -> None:
    """The options every paired task bench shares."""
    ap.add_argument("--model", default=None)
    ap.add_argument("--per-kind", type=int, default=per_kind)
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu", help="cpu | cuda (bfloat16 there, as the loader defaults)")
    ap.add_argument("--rounds", type=int, default=1, help="alternated rounds (latency: each task's median)")


def kinds_and_tasks(args: argparse.Namespace) -> tuple[list[str], list[Task]]:
    kinds = [k for k in KINDS if k in args.kinds.split(",")]
    return kinds, [t for t in make_tasks(args.per_kind, args.seed) if t.kind in kinds]


def engines(args: argparse.Namespace) -> Callable[[str | None], Any]:
    """The engine of a checkpoint directory (None: `--model`), loaded once."""
    from engine.service import TextEngine

    loaded: dict[str | None, Any] = {}

    def get(model: str | None) -> Any:
        key = model or args.model
        if key not in loaded:
            loaded[key] = TextEngine(key, threads=args.threads, device=args.device)
        return loaded[key]

    return get


def engine_and_tasks(args: argparse.Namespace):  # noqa: ANN201 - (TextEngine, kinds, tasks)
    kinds, tasks = kinds_and_tasks(args)
    return engines(args)(None), kinds, tasks
