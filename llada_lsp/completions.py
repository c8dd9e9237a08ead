"""The completion pipeline: document -> plan -> type-through / cache -> engine -> clean.

`CompletionService.complete` answers with the first complete draft of the span; the engine's
later edits go out as `llada/refine` notifications, then one `llada/stats` notification.
The newest request for a document wins: it cancels the older one's engine job.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from engine.api import CompletionRequest, EngineEvent, diff_edits
from llada_lsp.cache import Shown, SuggestionCache, key_of, remember, type_through
from llada_lsp.documents import Document, DocumentStore
from llada_lsp.engine_client import EngineClient, EngineJob
from llada_lsp.options import Options
from llada_lsp.plans import InfillPlan, make_plan
from llada_lsp.positions import Encoding, text_position
from llada_lsp.postprocess import Spec, clean, open_brackets, syntax_trim
from llada_lsp.syntax import adds_error

log = logging.getLogger(__name__)

Notify = Callable[[str, dict[str, Any]], None]


class PositionError(ValueError):
    """The position lies outside the document."""


@dataclass
class Answer:
    completion_id: str
    text: str
    kind: str
    offset: int
    word: str  # the identifier characters just before the cursor (for completion items)
    source: str  # "engine" | "cache" | "type_through"


@dataclass
class _Request:
    """Everything the refinement phase needs, captured when the request arrived."""

    cid: str
    uri: str
    version: int
    doc_text: str
    offset: int
    plan: InfillPlan
    spec: Spec
    language_id: str
    tree: Any
    key: str
    t0: float
    stats: dict[str, Any] = field(default_factory=dict)


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


def _word_before(left: str) -> str:
    i = len(left)
    while i > 0 and (left[i - 1].isalnum() or left[i - 1] == "_"):
        i -= 1
    return left[i:]


class CompletionService:
    def __init__(self, store: DocumentStore, engine: EngineClient, options: Options,
                 notify: Notify, encoding: Callable[[], Encoding]) -> None:
        self.store, self.engine, self.options = store, engine, options
        self.notify, self.encoding = notify, encoding
        self.cache = SuggestionCache(options.cache_size)
        self.shown: dict[str, Shown] = {}
        self.jobs: dict[str, EngineJob] = {}
        self.latest: dict[str, int] = {}
        self.serial = itertools.count(1)
        self.counters: Counter[str] = Counter()
        self.history: deque[dict[str, Any]] = deque(maxlen=500)
        self.tasks: set[asyncio.Task[None]] = set()
        self.last_plan: dict[str, str] = {}  # the latest request's plan (for debugInfo)

    # -- the request -------------------------------------------------------------------------
    async def complete(self, uri: str, line: int, character: int) -> Answer | None:
        t0 = time.perf_counter()
        doc = self.store.get(uri)
        enc = self.encoding()
        if not doc.index.is_valid(line, character, enc):
            raise PositionError(f"position {line}:{character} is past the end of {uri} "
                                f"({doc.index.line_count} lines)")
        serial = next(self.serial)
        self.latest[uri] = serial
        self.counters["requests"] += 1
        older = self.jobs.pop(uri, None)
        if older is not None:
            older.cancel("superseded")
        if not self.options.language_enabled(doc.language_id):
            return self._nothing("language disabled")
        why = doc.unservable_reason()
        if why is not None:
            return self._nothing(why)
        offset = doc.offset_at(line, character, enc)
        cid = f"{serial}"
        rest = type_through(self.shown.get(uri), doc.text, offset)
        if rest is not None:
            return self._serve_known(doc, offset, cid, rest, "type_through", t0)
        tree = doc.syntax_tree()
        plan = make_plan(doc.text, offset, doc.language_id, self.options, tree=tree,
                         index=doc.index)
        self.last_plan = {"uri": uri, "kind": plan.kind, "reason": plan.reason,
                          "completionId": cid}
        if plan.kind == "none" or plan.plan is None:
            return self._nothing(plan.reason)
        key = key_of(plan.prefix, plan.suffix, plan.kind)
        cached = self.cache.get(key)
        if cached is not None:
            if not cached:
                return self._nothing("cached: no suggestion")
            return self._serve_known(doc, offset, cid, cached, "cache", t0, plan.kind)
        if not self.engine.ready:
            return self._nothing(f"engine {self.engine.state}")
        if self.options.debounce_ms > 0:
            await asyncio.sleep(self.options.debounce_ms / 1000)
            if self.latest.get(uri) != serial:
                return self._nothing("superseded while debouncing")
        req = self._capture(doc, offset, cid, plan, key, tree, t0)
        job = self.engine.submit(CompletionRequest(cid, uri, plan.prefix, plan.suffix,
                                                   plan.plan))
        self.jobs[uri] = job
        try:
            answer = await self._first_answer(job, req, doc)
        except asyncio.CancelledError:
            job.cancel("cancelled")
            self.counters["client_cancelled"] += 1
            raise
        if answer is None:
            return None
        task = asyncio.current_task()
        if task is not None:  # refine after the response is written (callbacks run in order)
            task.add_done_callback(lambda t: self._start_refine(t, job, req, answer.text))
        return answer

    def _capture(self, doc: Document, offset: int, cid: str, plan: InfillPlan, key: str,
                 tree: Any, t0: float) -> _Request:
        text = doc.text
        ls = text.rfind("\n", 0, offset) + 1
        above_end = max(ls - 1, 0)
        above = ""
        while above_end > 0 and not above.strip():
            s = text.rfind("\n", 0, above_end) + 1
            above, above_end = text[s:above_end], s - 1
        assert plan.plan is not None
        spec = Spec(kind=plan.kind, left=text[ls:offset], suffix=text[offset: offset + 4000],
                    line_above=above, indent=plan.indent, brace=plan.brace,
                    keep_closer=plan.plan.keep_closer, max_lines=plan.plan.max_lines,
                    prefix_open=open_brackets(text[max(0, offset - 400): offset]))
        base_tree = tree.copy() if tree is not None and self.options.syntax_check else None
        return _Request(cid, doc.uri, doc.version, text, offset, plan, spec, doc.language_id,
                        base_tree, key, t0)

    async def _first_answer(self, job: EngineJob, req: _Request, doc: Document) -> Answer | None:
        async for ev, t_ev in job.events():
            if ev.kind == "error":
                self.counters["engine_errors"] += 1
                log.warning("engine error for %s: %s", req.cid, ev.error)
                return self._nothing(f"engine error: {ev.error}")
            if ev.kind == "done" and ev.reason in ("cancelled", "superseded"):
                return self._nothing(f"engine request {ev.reason}")
            if not (ev.draft_complete or ev.kind == "done"):
                continue
            text = self._clean(ev.text, req)
            if not text and ev.kind != "done":
                continue  # an empty draft: wait for the edits
            if doc.version != req.version or self.latest.get(req.uri) != int(req.cid):
                job.cancel("superseded")
                return self._nothing("document changed while drafting")
            now = time.perf_counter()
            engine_ms = (t_ev - job.submitted_at) * 1000
            req.stats.update(firstMs=(now - req.t0) * 1000,
                             overheadMs=max(0.0, (now - req.t0) * 1000 - engine_ms))
            if ev.kind == "done":
                self._finish(req, ev, text)
                if not text:
                    self._send_stats(req)
                    return self._nothing("empty after post-processing")
            self.shown[req.uri] = remember(req.cid, req.doc_text, req.offset, text,
                                           req.plan.kind)
            self.counters["answered"] += 1
            return Answer(req.cid, text, req.plan.kind, req.offset, _word_before(req.spec.left),
                          "engine")
        return self._nothing("engine stream ended")

    def _clean(self, raw: str, req: _Request) -> str:
        text, note = clean(raw, req.spec)
        if text and req.tree is not None and req.plan.kind != "line":
            before, after = req.doc_text[: req.offset], req.doc_text[req.offset:]
            text, note2 = syntax_trim(text, lambda t: adds_error(req.language_id, req.tree,
                                                                 before, t, after))
            if note2:
                self.counters["syntax_trimmed"] += 1
        return text

    # -- refinement ----------------------------------------------------------------------------
    def _start_refine(self, handler: asyncio.Future[Any], job: EngineJob, req: _Request,
                      text: str) -> None:
        if handler.cancelled() or req.stats.get("done"):
            if req.stats.get("done"):
                self._send_final(req, text, text, step=req.stats.get("forwards", 0))
            return
        task = asyncio.ensure_future(self._refine(job, req, text))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _refine(self, job: EngineJob, req: _Request, shown: str) -> None:
        last = shown
        async for ev, _t in job.events():
            if ev.kind == "error":
                self._send_final(req, last, last, ev.step, reason="error")
                return
            new = self._clean(ev.text, req) if ev.text or ev.kind != "done" else last
            if ev.kind == "done" and ev.reason in ("cancelled", "superseded"):
                self._send_final(req, last, last, ev.step, reason=ev.reason)
                self._finish(req, ev, None)
                return
            if ev.kind == "done":
                self._finish(req, ev, new)
                self._send_final(req, last, new, ev.step)
                return
            if new != last:
                self._send_refine(req, last, new, ev.step, final=False)
                last = new

    def _send_refine(self, req: _Request, old: str, new: str, step: int, final: bool,
                     reason: str | None = None) -> None:
        params: dict[str, Any] = {
            "completionId": req.cid, "uri": req.uri, "version": req.version,
            "edits": edits_between(old, new, self.encoding()), "text": new, "step": step,
            "final": final}
        if reason:
            params["reason"] = reason
        shown = self.shown.get(req.uri)
        if shown is not None and shown.completion_id == req.cid:
            shown.text = new
        self.counters["refines"] += 1
        self.notify("llada/refine", params)

    def _send_final(self, req: _Request, old: str, new: str, step: int,
                    reason: str | None = None) -> None:
        self._send_refine(req, old, new, step, final=True, reason=reason)
        self._send_stats(req)

    def _finish(self, req: _Request, ev: EngineEvent, final_text: str | None) -> None:
        st = ev.stats or {}
        req.stats.update(
            done=True, reason=ev.reason, forwards=st.get("forwards", ev.step),
            tokens=st.get("tokens", 0), tpf=st.get("tpf", 0.0),
            prefillTokens=st.get("prefill_tokens", 0), reusedTokens=st.get("reused_tokens", 0),
            queueMs=st.get("queue_ms", 0.0), firstDraftMs=st.get("first_draft_ms", 0.0),
            engineMs=st.get("total_ms", 0.0))
        if final_text is not None and ev.reason not in ("cancelled", "superseded", "error"):
            self.cache.put(req.key, final_text)

    def _send_stats(self, req: _Request) -> None:
        s = req.stats
        params = {"completionId": req.cid, "uri": req.uri, "kind": req.plan.kind,
                  "source": "engine", "cacheHit": False, "reason": s.get("reason"),
                  "queueMs": s.get("queueMs", 0.0), "forwards": s.get("forwards", 0),
                  "tokens": s.get("tokens", 0), "tpf": s.get("tpf", 0.0),
                  "prefillTokens": s.get("prefillTokens", 0),
                  "reusedTokens": s.get("reusedTokens", 0),
                  "firstDraftMs": s.get("firstDraftMs", 0.0), "engineMs": s.get("engineMs", 0.0),
                  "firstMs": s.get("firstMs", 0.0), "overheadMs": s.get("overheadMs", 0.0),
                  "totalMs": (time.perf_counter() - req.t0) * 1000}
        self.history.append(params)
        self.notify("llada/stats", params)

    # -- answers without the engine --------------------------------------------------------------
    def _serve_known(self, doc: Document, offset: int, cid: str, text: str, source: str,
                     t0: float, kind: str | None = None) -> Answer:
        shown = self.shown.get(doc.uri)
        kind = kind or (shown.kind if shown is not None else "line")
        self.shown[doc.uri] = remember(cid, doc.text, offset, text, kind)
        self.counters[source] += 1
        ms = (time.perf_counter() - t0) * 1000
        params = {"completionId": cid, "uri": doc.uri, "kind": kind, "source": source,
                  "cacheHit": True, "reason": source, "queueMs": 0.0, "forwards": 0, "tokens": 0,
                  "tpf": 0.0, "prefillTokens": 0, "reusedTokens": 0, "firstDraftMs": 0.0,
                  "engineMs": 0.0, "firstMs": ms, "overheadMs": ms, "totalMs": ms}
        self.history.append(params)

        def final(_: Any) -> None:  # every completion ends with one final llada/refine
            self.notify("llada/refine", {"completionId": cid, "uri": doc.uri,
                                         "version": version, "edits": [], "text": text,
                                         "step": 0, "final": True})
            self.notify("llada/stats", params)

        version = doc.version
        task = asyncio.current_task()
        if task is not None:
            task.add_done_callback(final)
        else:
            final(None)
        ls = doc.text.rfind("\n", 0, offset) + 1
        return Answer(cid, text, kind, offset, _word_before(doc.text[ls:offset]), source)

    def _nothing(self, why: str) -> None:
        self.counters["empty"] += 1
        log.debug("no completion: %s", why)
        return None

    def debug_info(self) -> dict[str, Any]:
        return {"counters": dict(self.counters), "engine": dict(self.engine.counters),
                "engineState": self.engine.state, "engineError": self.engine.error,
                "engineInfo": self.engine.info, "running": self.engine.running(),
                "cache": {"size": len(self.cache), "hits": self.cache.hits,
                          "misses": self.cache.misses},
                "refining": len(self.tasks), "lastPlan": dict(self.last_plan)}
