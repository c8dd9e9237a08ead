"""What to show of the engine's texts for one request: cleaned as the plan's kind wants,
checked against the document's parse tree (the error spans a draft adds, trimmed when they
stay), and, when the engine decoded alternatives, the candidates weighed: the first that
fits is shown, the others that fit are kept for cycling.
"""

from __future__ import annotations

from collections import Counter

from engine.api import EngineEvent
from llada_lsp.completion.answers import InFlight
from llada_lsp.completion.postprocess import clean, first_fitting, syntax_trim
from llada_lsp.text.syntax import adds_error, error_spans


class Weigher:
    """`counters`: the service's counters (alternative_shown, syntax_trimmed)."""

    def __init__(self, counters: Counter[str]) -> None:
        self.counters = counters

    def clean(self, raw: str, req: InFlight) -> str:
        text, req.note = clean(raw, req.spec)
        return text

    def pick(self, ev: EngineEvent, req: InFlight, primary: str) -> tuple[str, int, tuple[str, ...]]:
        """The text to show among the primary's (`primary`, cleaned) and the done event's
        alternatives (cleaned here), and its index: the first that adds no parse error
        (every plan kind; without a tree, the first non-empty one). Then the other
        candidates that fit as well, distinct and in rank order (for cycling)."""
        cleaned = [clean(a, req.spec) for a in ev.alternatives]
        cands = [primary, *(t for t, _ in cleaned)]
        check = None
        if req.tree is not None:
            before, after = req.doc_text[: req.offset], req.doc_text[req.offset:]

            def check(t: str) -> bool:
                return adds_error(req.language_id, req.tree, before, t, after)
        i = first_fitting(cands, check)
        if i:
            self.counters["alternative_shown"] += 1
            req.note = cleaned[i - 1][1]
        others = tuple(dict.fromkeys(c for c in cands if c.strip() and c != cands[i]
                                     and (check is None or not check(c))))
        return cands[i], i, others

    def new_errors(self, req: InFlight, text: str) -> list[tuple[int, int]]:
        """Character spans of `text` inside parse errors it adds ([] = none, or unchecked)."""
        if not text or req.tree is None or req.plan.kind == "line":
            return []
        return error_spans(req.language_id, req.tree, req.doc_text[: req.offset], text,
                           req.doc_text[req.offset:])

    def line_awaits_alternatives(self, req: InFlight, text: str) -> bool:
        """A line (not otherwise checked) that adds a parse error, while the engine decodes
        alternatives: the first answer waits for them (clients without `llada/refine` only
        ever see the first answer)."""
        if req.plan.kind != "line" or req.tree is None or not text or req.candidates < 2:
            return False
        return adds_error(req.language_id, req.tree, req.doc_text[: req.offset], text, req.doc_text[req.offset:])

    def trim(self, text: str, req: InFlight) -> str:
        before, after = req.doc_text[: req.offset], req.doc_text[req.offset:]
        text, note = syntax_trim(text, lambda t: adds_error(req.language_id, req.tree, before,
                                                            t, after))
        if note:
            self.counters["syntax_trimmed"] += 1
            req.note = note
        return text

    def checked(self, raw: str, req: InFlight) -> str:
        """Cleaned, and trimmed when it adds a parse error (refinements after the answer)."""
        text = self.clean(raw, req)
        return self.trim(text, req) if self.new_errors(req, text) else text
