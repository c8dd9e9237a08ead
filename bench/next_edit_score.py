"""Scoring of `bench/next_edit.py`: location precision and recall, content exact match, noise
false positives (Wilson 95% intervals), the answers as the server shows them at a fill
threshold, and the precision gate.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from bench.next_edit_systems import Answer
from bench.next_edit_tasks import Task
from llada_lsp.nextedit.edit_window import Suggested


@dataclass
class Tally:
    suggestions: int = 0
    located: int = 0  # suggestions inside a true site's span
    right: int = 0  # located and the site's text then equals the truth
    sites: int = 0
    sites_located: int = 0
    sites_right: int = 0
    noise_tasks: int = 0
    noise_hit: int = 0
    ms: list[float] = field(default_factory=list)
    analysis_ms: list[float] = field(default_factory=list)
    sources: dict[str, int] = field(default_factory=dict)
    placeholders: int = 0  # suggestions that are placeholders
    placeholders_located: int = 0
    placeholders_right: int = 0  # located and exactly the truth (the name was the argument)
    sites_placeholder_only: int = 0  # sites located by a placeholder that is not exactly right


def score(t: Task, ans: Answer, tally: Tally) -> None:
    tally.suggestions += len(ans.suggestions)
    tally.ms.append(ans.ms)
    tally.analysis_ms.append(ans.analysis_ms)
    if t.kind == "noise":
        tally.noise_tasks += 1
        tally.noise_hit += bool(ans.suggestions)
        return
    tally.sites += len(t.truth)
    located: set[int] = set()
    right: set[int] = set()
    held: set[int] = set()
    for s in ans.suggestions:
        holder = s.source == "placeholder"
        tally.placeholders += holder
        k = next((k for k, tr in enumerate(t.truth) if tr.start <= s.start and s.end <= tr.end
                  and (s.start < tr.end or s.start == s.end)), None)
        if k is None:
            continue
        tr = t.truth[k]
        tally.located += 1
        tally.placeholders_located += holder
        located.add(k)
        got = t.new[tr.start:s.start] + s.text + t.new[s.end:tr.end]
        if got == tr.text:
            tally.right += 1
            tally.placeholders_right += holder
            right.add(k)
            tally.sources[s.source] = tally.sources.get(s.source, 0) + 1
        elif holder:
            held.add(k)
    tally.sites_located += len(located)
    tally.sites_right += len(right)
    tally.sites_placeholder_only += len(held - right)


def wilson(k: int, n: int) -> tuple[float, float]:
    if n == 0:
        return (0.0, 0.0)
    z, p = 1.96, k / n
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return (round(max(0.0, c - h), 3), round(min(1.0, c + h), 3))


def row(system: str, kind: str, tl: Tally) -> dict[str, Any]:
    out: dict[str, Any] = {"system": system, "kind": kind, "suggestions": tl.suggestions,
                           "p50_ms": round(statistics.median(tl.ms), 2) if tl.ms else 0.0}
    if kind == "all":  # every task: the latency from the edit to the answer
        out.update(p95_ms=round(sorted(tl.ms)[int(0.95 * (len(tl.ms) - 1))], 2) if tl.ms else 0.0, tasks=len(tl.ms))
        return out
    if kind == "noise":
        out.update(fp_rate=round(tl.noise_hit / max(1, tl.noise_tasks), 3), fp_ci=wilson(tl.noise_hit, tl.noise_tasks),
                   tasks=tl.noise_tasks)
        return out
    out.update(sites=tl.sites, precision=round(tl.located / tl.suggestions, 3) if tl.suggestions else 0.0,
               precision_ci=wilson(tl.located, tl.suggestions), recall=round(tl.sites_located / max(1, tl.sites), 3),
               recall_ci=wilson(tl.sites_located, tl.sites),
               content_em=round(tl.sites_right / tl.sites_located, 3) if tl.sites_located else 0.0,
               exact_precision=round(tl.right / tl.suggestions, 3) if tl.suggestions else 0.0,
               sources=tl.sources, placeholders=tl.placeholders, placeholders_exact=tl.placeholders_right)
    return out


def evaluate(system: str, tasks: list[Task], answer: Callable[[Task], Answer]) -> tuple[list[dict[str, Any]], list]:
    tallies: dict[str, Tally] = {}
    answers = []
    for t in tasks:
        ans = answer(t)
        answers.append(ans)
        score(t, ans, tallies.setdefault(t.key, Tally()))
        tallies.setdefault("all", Tally()).ms.append(ans.ms)
        if t.kind == "rename" and t.distractor:
            score(t, ans, tallies.setdefault("rename_distractor", Tally()))
    return [row(system, k, tl) for k, tl in tallies.items()], answers


OFF = 1.01  # a fill threshold no confidence reaches: the model's fills off


def passes(s: Suggested, th: float) -> bool:
    """Whether the server shows `s` at fill threshold `th`: the analysis' own suggestions and
    placeholders always, a model fill at or above `th` (below it, the site's placeholder)."""
    return s.source in ("analysis", "placeholder") or s.confidence >= th


def at_threshold(a: Answer, th: float) -> list[Suggested]:
    """The answer as the server shows it at fill threshold `th`."""
    if th > 1.0:  # fills off: no engine job, every masked site its placeholder
        return sorted([s for s in a.suggestions if s.source == "analysis"] + list(a.placeholders.values()),
                      key=lambda s: (s.start, s.end))
    out = []
    for s in a.suggestions:
        if passes(s, th):
            out.append(s)
        elif (p := a.placeholders.get((s.start, s.end))) is not None:
            out.append(p)
    return out


def gate(tasks: list[Task], answers: list[Answer]) -> dict[str, Any]:
    """The lowest fill threshold at which the model's own fills (source "model") are exactly
    right in >= 90% of cases (`OFF` when none is: only the analysis' suggestions remain), and
    the precision and recall of everything suggested there (every kind; a noise suggestion is
    wrong). On by default when that precision is >= 0.9 and the recall >= 0.5."""
    def tally(th: float, model_only: bool) -> Tally:
        tl = Tally()
        for t, a in zip(tasks, answers, strict=True):
            kept = [s for s in at_threshold(a, th) if s.source == "model" or not model_only]
            score(t, Answer(kept, a.ms), tl)
        return tl

    chosen = OFF
    for th in [x / 20 for x in range(20)]:
        m = tally(th, True)
        if m.suggestions and m.right / m.suggestions >= 0.9:
            chosen = th
            break
    m, tl = tally(chosen, True), tally(chosen, False)
    # a placeholder claims a place, not content: it counts as right when it is located
    good = tl.right + tl.placeholders_located - tl.placeholders_right
    good_sites = tl.sites_right + tl.sites_placeholder_only
    p = good / tl.suggestions if tl.suggestions else 0.0
    r = good_sites / max(1, tl.sites)
    return {"threshold": chosen, "model_fills": m.suggestions, "model_fills_right": m.right,
            "precision": round(p, 3), "precision_ci": wilson(good, tl.suggestions), "recall": round(r, 3),
            "recall_ci": wilson(good_sites, tl.sites), "on": p >= 0.9 and r >= 0.5,
            "placeholders": tl.placeholders, "placeholders_located": tl.placeholders_located,
            "placeholders_exact": tl.placeholders_right}


def gated(answers: Iterator[Answer], th: float) -> Callable[[Task], Answer]:
    """The answers again (in task order), without the suggestions below `th`."""
    def answer(_t: Task) -> Answer:
        a = next(answers)
        # fills off: the server asks the engine nothing, so their time is not spent
        ms = a.ms - a.fill_ms if th > 1.0 else a.ms
        return Answer(at_threshold(a, th), ms, a.analysis_ms)
    return answer


