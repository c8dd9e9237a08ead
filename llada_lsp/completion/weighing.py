"""What to show of the engine's texts for one request: cleaned as the plan's kind wants,
checked by the request's guard (`llada_lsp.completion.guard`: the error spans a draft adds,
cut when they stay), and, when the engine decoded alternatives, the candidates weighed: the first that
fits is shown, the others that fit are kept for cycling.
"""

from __future__ import annotations

from collections import Counter

from engine.api import EngineEvent
from llada_lsp.completion.answers import InFlight
from llada_lsp.completion.postprocess import clean, first_fitting


class Weigher:
    """`counters`: the service's counters (alternative_shown, syntax_trimmed)."""

    def __init__(self, counters: Counter[str]) -> None:
        self.counters = counters

    def clean(self, raw: str, req: InFlight) -> str:
        text, req.note = clean(raw, req.spec)
        return text

    def pick(self, ev: EngineEvent, req: InFlight, primary: str) -> tuple[str, int, tuple[str, ...]]:
        """The text to show among the primary's (`primary`, cleaned) and the done event's
        alternatives (cleaned here), and its index: the first that passes the guard (every
        plan kind; without a tree, the first non-empty one). Then the other candidates that
        pass as well, distinct and in rank order (for cycling)."""
        cleaned = [clean(a, req.spec) for a in ev.alternatives]
        cands = [primary, *(t for t, _ in cleaned)]
        guard = req.guard
        check = guard.breaks if guard.active else None
        i = first_fitting(cands, check)
        if i:
            self.counters["alternative_shown"] += 1
            req.note = cleaned[i - 1][1]
        others = tuple(dict.fromkeys(c for c in cands if c.strip() and c != cands[i]
                                     and (check is None or not check(c))))
        return cands[i], i, others

    def new_errors(self, req: InFlight, text: str) -> list[tuple[int, int]]:
        """Character spans of `text` inside parse errors accepting it adds ([] = none, or
        unchecked): every plan kind, over the rest of the line its item replaces."""
        return req.guard.spans(text)

    def trim(self, text: str, req: InFlight) -> str:
        """`text`, or its longest cut that passes the guard ("" when none does)."""
        cut = req.guard.cut(text)
        if cut != text:
            self.counters["syntax_trimmed"] += 1
            req.note = "trimmed to parse" if cut else "adds a parse error"
        return cut
