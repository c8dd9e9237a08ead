"""The server's notifications about completions, `llada/refine` and `llada/stats`, and about
the engine's health, `llada/status` (with `window/showMessage` once per outage and recovery).

Shapes (docs/lsp.md; the VS Code and Neovim clients read them):
  llada/refine {completionId, uri, version, edits, text, step, final, reason?}
  llada/stats  {completionId, uri, kind, source, cacheHit, shown, reason, queueMs, forwards,
                tokens, tpf, prefillTokens, reusedTokens, firstDraftMs, engineMs, firstMs,
                overheadMs, totalMs}
  llada/status {state: "loading"|"ready"|"error", message, engine, nextEdit,
                pace: ""|"warming"|"slow: 3.1 s/step"|"stuck: <why>"}
"""

from __future__ import annotations

import time
from collections import Counter, deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from engine.api import EngineEvent, diff_edits
from llada_lsp.text.positions import Encoding, text_position

if TYPE_CHECKING:
    from llada_lsp.completion.answers import InFlight

Notify = Callable[[str, dict[str, Any]], None]
Show = Callable[[str, str], None]  # (level "error" | "warning" | "info", text): window/showMessage


class EngineStatus:
    """Tells the client of each change of the engine's state: `llada/status` every time, and a
    message once when the engine is lost (or refuses) and once when it is back."""

    def __init__(self, notify: Notify, show: Show, info: Callable[[], dict[str, Any]],
                 features: Callable[[], dict[str, Any]] = dict) -> None:
        self.notify, self.show, self.info, self.features = notify, show, info, features
        self.down = False  # an outage was shown and the engine has not come back since

    def changed(self, state: str, message: str) -> None:
        self.notify("llada/status", {"state": state, "message": message, "engine": self.info(),
                                     **self.features()})
        if state == "error" and not self.down:
            self.down = True
            self.show("warning", f"llada: the engine is unavailable: {message}")
        elif state == "ready" and self.down:
            self.down = False
            self.show("info", "llada: the engine is back")


def edits_between(old: str, new: str, encoding: Encoding) -> list[dict[str, Any]]:
    """LSP-style text edits turning suggestion `old` into `new`: ranges are (line, character)
    in the suggestion's own text, characters counted in the negotiated position encoding."""
    out = []
    for e in diff_edits(old, new):
        sl, sc = text_position(old, e.start, encoding)
        el, ec = text_position(old, e.end, encoding)
        out.append({"range": {"start": {"line": sl, "character": sc},
                              "end": {"line": el, "character": ec}}, "newText": e.text})
    return out


class Reporter:
    """`refines()`: whether `llada/refine` is sent at all (False for an engine without edit
    events, e.g. SGLang: its answers are final, so editors get none)."""

    def __init__(self, notify: Notify, encoding: Callable[[], Encoding],
                 counters: Counter[str], history: deque[dict[str, Any]],
                 refines: Callable[[], bool] = lambda: True) -> None:
        self.notify, self.encoding = notify, encoding
        self.counters, self.history = counters, history
        self.refines = refines

    def refine(self, cid: str, uri: str, version: int, old: str, new: str, step: int,
               final: bool, reason: str | None = None) -> None:
        params: dict[str, Any] = {
            "completionId": cid, "uri": uri, "version": version,
            "edits": edits_between(old, new, self.encoding()), "text": new, "step": step,
            "final": final}
        if reason:
            params["reason"] = reason
        if not self.refines():
            self.counters["refines_suppressed"] += 1
            return
        self.counters["refines"] += 1
        self.notify("llada/refine", params)

    @staticmethod
    def finished(stats: dict[str, Any], ev: EngineEvent) -> None:
        """Record the engine's done event into a request's stats."""
        st = ev.stats or {}
        stats.update(
            done=True, reason=ev.reason, forwards=st.get("forwards", ev.step),
            tokens=st.get("tokens", 0), tpf=st.get("tpf", 0.0),
            prefillTokens=st.get("prefill_tokens", 0), reusedTokens=st.get("reused_tokens", 0),
            queueMs=st.get("queue_ms", 0.0), firstDraftMs=st.get("first_draft_ms", 0.0),
            engineMs=st.get("total_ms", 0.0), alternatives=len(ev.alternatives),
            groupForwards=st.get("group_forwards", st.get("forwards", ev.step)))

    def stats(self, req: InFlight, source: str, shown: bool = True, empty: str = "") -> None:
        """`shown`: False for an answer that came out empty (the clients keep the latency of
        the last suggestion they showed, and say why nothing showed: `empty`, sent as
        `emptyReason`)."""
        s = req.stats
        params = {"completionId": req.cid, "uri": req.uri, "kind": req.plan.kind,
                  "source": source, "cacheHit": False, "shown": shown, "reason": s.get("reason"),
                  "queueMs": s.get("queueMs", 0.0), "forwards": s.get("forwards", 0),
                  "tokens": s.get("tokens", 0), "tpf": s.get("tpf", 0.0),
                  "prefillTokens": s.get("prefillTokens", 0),
                  "reusedTokens": s.get("reusedTokens", 0),
                  "firstDraftMs": s.get("firstDraftMs", 0.0), "engineMs": s.get("engineMs", 0.0),
                  "firstMs": s.get("firstMs", 0.0), "overheadMs": s.get("overheadMs", 0.0),
                  "alternatives": s.get("alternatives", 0), "groupForwards": s.get("groupForwards", 0),
                  "totalMs": (time.perf_counter() - req.t0) * 1000}
        if not shown:
            params["emptyReason"] = empty or "nothing left"
        self.history.append(params)
        self.notify("llada/stats", params)

    def known(self, cid: str, uri: str, version: int, kind: str, source: str, text: str,
              t0: float) -> Callable[[], None]:
        """Stats of an answer served without the engine; returns the sender of its final
        refine and stats (to run once the response is written)."""
        ms = (time.perf_counter() - t0) * 1000
        params = {"completionId": cid, "uri": uri, "kind": kind, "source": source,
                  "cacheHit": True, "shown": True, "reason": source, "queueMs": 0.0, "forwards": 0,
                  "tokens": 0, "tpf": 0.0, "prefillTokens": 0, "reusedTokens": 0, "firstDraftMs": 0.0,
                  "engineMs": 0.0, "firstMs": ms, "overheadMs": ms, "totalMs": ms}
        self.history.append(params)

        def final() -> None:
            if self.refines():
                self.notify("llada/refine", {"completionId": cid, "uri": uri, "version": version,
                                             "edits": [], "text": text, "step": 0, "final": True})
            self.notify("llada/stats", params)

        return final
