"""One request's text view of its token events (drafts, then edits, then done with its
stats), for the step loop (`engine.decoding.scheduler`)."""

from __future__ import annotations

import time
from typing import Any

from engine.api import CompletionRequest, EngineEvent, EventKind
from engine.decoding.decode import Sequence, TokenEvent
from engine.decoding.host import Host


class TextStream:
    """One request's text view of its token events: drafts until the first complete draft of
    the span, then edits, then done with timings; the texts come from the loop's `Host`."""

    def __init__(self, engine: Host, req: CompletionRequest, seq: Sequence, partial: str,
                 t0: float, reused: int, queue_ms: float) -> None:
        self.engine, self.req, self.seq, self.partial = engine, req, seq, partial
        self.t0, self.reused, self.queue_ms = t0, reused, queue_ms
        self.prev = ""
        self.first_draft_ms: float | None = None

    def feed(self, ev: TokenEvent) -> EngineEvent | None:
        """The text event of one forward's token event, or None when the text did not change."""
        text = self.engine.text(self.seq, self.req.plan, self.partial)
        rid, prev = self.req.request_id, self.prev
        if self.first_draft_ms is None and ev.complete:
            self.first_draft_ms = (time.perf_counter() - self.t0) * 1000
            self.prev = text
            return EngineEvent("draft", rid, text, step=ev.step, draft_complete=True)
        if text == prev:
            return None
        self.prev = text
        kind: EventKind = "draft" if self.first_draft_ms is None else "edit"
        return EngineEvent(kind, rid, text, step=ev.step, draft_complete=self.first_draft_ms is not None)

    def finish(self, ev: TokenEvent, extra: dict[str, Any] | None = None,
               forks: list[Sequence] | None = None) -> EngineEvent:
        seq = self.seq
        text = self.engine.final_text(seq, self.req.plan, self.partial)
        alts = self.engine.alternative_texts(self.req, forks, self.partial, text) \
            if forks and ev.reason != "cancelled" else ()
        total = (time.perf_counter() - self.t0) * 1000
        n_tok = len(seq.final_middle())
        # the weakest committed token of the text (next-edit fills are gated on it)
        min_conf = float(seq.commit_conf[:n_tok].min()) if n_tok else 1.0
        # every model forward the request caused (alternatives and remask passes included)
        fw = seq.tally.forwards
        stats = {"forwards": fw, "tokens": n_tok, "tpf": n_tok / max(1, fw), "primary_forwards": seq.forwards,
                 "prefill_tokens": len(seq.prompt) - self.reused, "reused_tokens": self.reused,
                 "queue_ms": self.queue_ms, "agreed_tokens": seq.agreed,
                 "first_draft_ms": self.first_draft_ms if self.first_draft_ms is not None else total,
                 "total_ms": total, "min_confidence": min_conf, **(extra or {})}
        return EngineEvent("done", self.req.request_id, text, step=seq.forwards, draft_complete=True,
                           reason=ev.reason, stats=stats, alternatives=alts)
