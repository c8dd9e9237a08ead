"""The completion pipeline: document -> plan -> type-through / cache -> engine -> clean.

`CompletionService.complete` answers with the first complete draft of the span that adds no
parse error (syntax-guided edit: the tokens inside a new error go back to the engine for
re-masking, a bounded number of passes, before anything is shown; then it is trimmed). The
engine's later edits go out as `llada/refine` notifications, then one `llada/stats`
notification. The newest request for a document wins: it cancels the older one's engine job.
When the engine decodes alternatives (other first tokens, `engine.decoding.alternatives`), the done
event's candidates are weighed: the first that adds no parse error is the one shown (a line
whose first draft adds one waits for them; `llada_lsp.weighing`). An answer that comes out
empty from fewer candidates is decoded again with `rescue_alternatives` of them (`rescue`).
An Invoked request waits for the candidates and answers all that fit (cycling).
After an accept, `llada_lsp.speculation` asks for the next completion ahead of time.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections import Counter, OrderedDict, deque
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

from engine.api import CompletionRequest, ContextChunk, EngineEvent, Names
from llada_lsp.answers import Answer, Request, Selected, Settled, capture, word_before
from llada_lsp.cache import Shown, SuggestionCache, key_of, remember, type_through
from llada_lsp.capabilities import Capabilities
from llada_lsp.documents import Document, DocumentStore
from llada_lsp.engine_base import EngineClient, EngineJob
from llada_lsp.line_rest import fit, rest_of_line
from llada_lsp.name_hints import NameHints
from llada_lsp.options import Options
from llada_lsp.plans import InfillPlan, make_plan
from llada_lsp.positions import Encoding, PositionError, selected_span
from llada_lsp.postprocess import raw_spans, remask_can_help
from llada_lsp.refining import Refiner
from llada_lsp.reporting import Reporter
from llada_lsp.speculation import Ahead, Speculator
from llada_lsp.weighing import Weigher
from llada_lsp.workspace import WorkspaceContext, context_budget

log = logging.getLogger(__name__)

Notify = Callable[[str, dict[str, Any]], None]


class CompletionService:
    def __init__(self, store: DocumentStore, engine: EngineClient, options: Options,
                 notify: Notify, encoding: Callable[[], Encoding]) -> None:
        self.store, self.engine, self.options = store, engine, options
        self.encoding = encoding
        self.cache = SuggestionCache(options.cache_size)
        self.shown: dict[str, Shown] = {}
        # cid -> (uri, what was shown, the texts answered: the first answer, then the others)
        self.recent: OrderedDict[str, tuple[str, Shown, tuple[str, ...]]] = OrderedDict()
        self.jobs: dict[str, EngineJob] = {}
        self.latest: dict[str, int] = {}
        self.serial = itertools.count(1)
        self.counters: Counter[str] = Counter()
        self.empty_reasons: Counter[str] = Counter()  # why requests got no suggestion
        self.last_empty = ""  # the latest of them, in full
        self.history: deque[dict[str, Any]] = deque(maxlen=500)
        self.last_plan: dict[str, str] = {}  # the latest request's plan (for debugInfo)
        self.report = Reporter(notify, encoding, self.counters, self.history, lambda: self.caps.edits)
        self.workspace = WorkspaceContext(store)
        self.name_hints = NameHints(self.workspace.index)
        self.weigh = Weigher(self.counters)
        self.refiner = Refiner(self.weigh, self.report, self.shown, self.finish)
        self.speculator = Speculator(store, self.cache, options, self.counters, self.recent,
                                     lambda: self.engine.ready, self.decode_ahead)

    @property
    def caps(self) -> Capabilities:
        """What the engine can do (`llada_lsp.capabilities`): without edit events the answer
        is the finished text and no `llada/refine` follows; without remask or alternatives
        none is asked for."""
        return Capabilities.of(self.engine.info)

    # -- the request -------------------------------------------------------------------------
    async def complete(self, uri: str, line: int, character: int,
                       arrived: float | None = None, invoked: bool = False,
                       selected: Selected | None = None) -> Answer | None:
        """The answer at (line, character); `arrived`: when the request reached the server
        (timings count from there), default now. `invoked`: the user asked explicitly (LSP
        triggerKind Invoked): wait for the candidates (at least `invoked_alternatives`) and
        answer every one that fits, so the editor can cycle through them. `selected`: an
        item of the editor's completion widget is selected; the answer continues its text
        (the caller puts that text in front and replaces the item's range)."""
        t0 = arrived if arrived is not None else time.perf_counter()
        doc = self.store.get(uri)
        real = doc
        enc = self.encoding()
        if not doc.index.is_valid(line, character, enc):
            raise PositionError(f"position {line}:{character} is past the end of {uri} "
                                f"({doc.index.line_count} lines)")
        span = selected_span(doc.index, selected.start, selected.end, enc) if selected is not None else None
        serial = next(self.serial)
        self.latest[uri] = serial
        self.counters["requests"] += 1
        older = self.jobs.pop(uri, None)
        if older is not None:
            older.cancel("superseded")
        if not self.options.language_enabled(doc.language_id):
            self._nothing("language disabled")
            return None
        why = doc.unservable_reason()
        if why is not None:
            self._nothing(why)
            return None
        offset = real_offset = doc.offset_at(line, character, enc)
        lead = ""
        if selected is not None and span is not None:
            doc, offset, lead = real.replaced(*span, selected.text), span[0] + len(selected.text), selected.text
            self.counters["selected_item"] += 1
            why = doc.unservable_reason()  # the selected item's text may be huge or binary
            if why is not None:
                self._nothing(f"with the selected item, {why}")
                return None
        cid = f"{serial}"
        tail = "" if selected is not None else rest_of_line(doc.text, offset)
        rest = type_through(self.shown.get(uri), doc.text, offset)
        if rest is not None:
            return self._serve_known(doc, offset, cid, rest, "type_through", t0, lead=lead, tail=tail)
        tree = doc.syntax_tree()
        plan = make_plan(doc.text, offset, doc.language_id, self.options, tree=tree,
                         index=doc.index)
        self.last_plan = {"uri": uri, "kind": plan.kind, "reason": plan.reason,
                          "completionId": cid}
        if plan.kind == "none" or plan.plan is None:
            self._nothing(plan.reason)
            return None
        key = key_of(plan.prefix, plan.suffix, plan.kind)
        cached = self.cache.get(key)
        if cached is not None and invoked and self._wants_more(plan, key):
            cached = None  # asked for candidates the cache does not have
        if cached is None and not invoked:  # a speculation gives one candidate
            cached = await self.speculator.wait_for(key)
            if cached is not None:
                self.counters["speculative_wait"] += 1
            if self.latest.get(uri) != serial:
                self._nothing("superseded while waiting for the speculation")
                return None
        if cached is not None:
            if not cached:
                self._nothing("cached: no suggestion")
                return None
            return self._serve_known(doc, offset, cid, cached, "cache", t0, plan.kind,
                                     self.cache.others(key), lead, tail)
        if not self.engine.ready:
            self._nothing(f"engine {self.engine.state}")
            return None
        if self.options.debounce_ms > 0:
            await asyncio.sleep(self.options.debounce_ms / 1000)
            if self.latest.get(uri) != serial:
                self._nothing("superseded while debouncing")
                return None
        req = capture(doc, offset, cid, plan, key, tree, t0, syntax_check=self.options.syntax_check)
        req.lead, req.rest = lead, tail
        engine_plan = plan.plan
        if invoked and self._wants_more(plan, key):
            req.candidates = self.options.invoked_alternatives
            engine_plan = replace(engine_plan, alternatives=req.candidates)
            self.counters["invoked"] += 1
        context = self.context_for(real, real_offset, plan)
        job = self.engine.submit(CompletionRequest(cid, uri, plan.prefix, plan.suffix,
                                                   engine_plan, context, self.names_for(doc, offset, tree)))
        self.jobs[uri] = req.job = job
        try:
            out = await self._first_answer(job, req, real, until_done=invoked or not self.caps.edits)
        except asyncio.CancelledError:
            (req.job or job).cancel("cancelled")  # a remask's job, if one runs
            self.counters["client_cancelled"] += 1
            raise
        if out is None:
            return None
        answer, job = out
        task = asyncio.current_task()
        if task is not None:  # refine after the response is written (callbacks run in order)
            task.add_done_callback(lambda t: self.refiner.start(t, job, req, answer.text))
        return answer

    def decode_ahead(self, ahead: Ahead) -> Awaitable[str | None]:
        """A speculation: submitted now; its final text (settled, rescued when empty, as a
        request's would be) goes into the suggestion cache."""
        req = capture(ahead.doc, ahead.offset, ahead.cid, ahead.plan, ahead.key, ahead.tree,
                      ahead.t0, syntax_check=self.options.syntax_check, speculative=True)
        assert ahead.plan.plan is not None
        context = self.context_for(ahead.doc, ahead.offset, ahead.plan)
        job = self.engine.submit(CompletionRequest(ahead.cid, ahead.doc.uri, ahead.plan.prefix,
                                                   ahead.plan.suffix, ahead.plan.plan, context,
                                                   self.names_for(ahead.doc, ahead.offset, ahead.tree)))
        version, revision, doc = ahead.doc.version, ahead.doc.revision, ahead.doc

        def wanted() -> bool:
            return doc.version == version and doc.revision == revision

        async def run() -> str | None:
            out = await self.settle(job, req, wanted, until_done=True)
            if not isinstance(out, str) and not out.text:
                out = await self.rescue(out, req, wanted)  # as a request would be
            if isinstance(out, str):
                log.debug("speculation %s: nothing (%s)", req.cid, out)
                return None
            self.cache.put(ahead.key, out.text, out.others, req.candidates)
            return out.text

        return run()

    def context_for(self, doc: Document, offset: int, plan: InfillPlan) -> tuple[ContextChunk, ...]:
        """The workspace context of a request (llada_lsp.workspace; () when the option is off)."""
        if not self.options.workspace_context:
            self.workspace.note(doc.uri, (), False)
            return ()
        budget = context_budget(self.options.context_tokens, self.engine.info.get("max_prompt_tokens"))
        return self.workspace.chunks_for(doc, offset, plan.prefix + plan.suffix, budget)

    def names_for(self, doc: Document, offset: int, tree: Any) -> Names | None:
        """The known names for the identifier at the cursor (llada_lsp.name_hints), when the
        option is on and the engine takes them."""
        if not self.options.names_constraint or not self.caps.names:
            return None
        names = self.name_hints.hint(doc, offset, tree, self.options.names_keep_own_above)
        if names is not None:
            self.counters["names_constrained"] += 1
        return names

    def _wants_more(self, plan: InfillPlan, key: str) -> bool:
        """Whether an invoked request should decode more candidates than the mode does and
        the cache holds for `key`."""
        assert plan.plan is not None
        wanted = min(self.options.invoked_alternatives, self.caps.alternatives)
        return wanted > max(plan.candidates, self.cache.decoded(key))

    async def _first_answer(self, job: EngineJob, req: Request, doc: Document,
                            until_done: bool = False) -> tuple[Answer, EngineJob] | None:
        def wanted() -> bool:
            return doc.version == req.version and doc.revision == req.revision and \
                self.latest.get(req.uri) == int(req.cid)

        out = await self.settle(job, req, wanted, until_done=until_done)
        if not isinstance(out, str) and out.event.kind == "done" and not out.text:
            out = await self.rescue(out, req, wanted)
        if isinstance(out, str):
            self._nothing(out)
            return None
        text, job, ev = out.text, out.job, out.event
        total = (time.perf_counter() - req.t0) * 1000
        req.stats.update(firstMs=total, overheadMs=max(0.0, total - req.engine_ms))
        if ev.kind == "done":
            self.finish(req, ev, text, out.others)
            if not text:
                self.report.stats(req, "engine")
                self._nothing(f"empty after post-processing ({req.note or 'nothing left'})")
                return None
        self._show(req.uri, req.cid, req.doc_text, req.offset, text, req.plan.kind, out.others)
        self.counters["answered"] += 1
        return Answer(req.cid, text, req.plan.kind, req.offset, word_before(req.spec.left),
                      "engine", out.others, req.rest), job

    async def rescue(self, empty: Settled, req: Request, wanted: Callable[[], bool]) -> Settled:
        """An answer that came out empty, from fewer than `rescue_alternatives` candidates:
        decode that many (the prompt is in the engine's prompt cache) and settle on the first
        that fits. Returns `empty` when that finds nothing either (or is off)."""
        n, plan = min(self.options.rescue_alternatives, self.caps.alternatives), empty.job.completion.plan
        if n <= req.candidates or not wanted():
            return empty
        self.counters["empty_rescues"] += 1
        req.candidates = n
        job = self.engine.submit(CompletionRequest(req.cid, req.uri, req.plan.prefix, req.plan.suffix,
                                                   replace(plan, alternatives=n), empty.job.request.context,
                                                   empty.job.completion.names))
        if self.jobs.get(req.uri) is empty.job:
            self.jobs[req.uri] = job  # a newer request cancels the rescue
        req.job = job
        out = await self.settle(job, req, wanted, until_done=True)
        if isinstance(out, str) or not out.text:
            return empty
        self.counters["empty_rescued"] += 1
        return out

    async def settle(self, job: EngineJob, req: Request, wanted: Callable[[], bool],
                     until_done: bool) -> Settled | str:
        """Drive `job` to a text worth showing: its first complete draft (its final text with
        `until_done`) that adds no parse error. A final text that still adds one has the
        error's tokens re-masked (up to `syntax_remask_passes` engine passes, while a pass may
        help: not when the error covers all of it, nor after a pass that changed nothing);
        after that it is trimmed to the longest prefix that parses. A string result says why
        nothing."""
        passes = 0
        bad: tuple[str, EngineJob, EngineEvent] | None = None
        while True:
            nxt: EngineJob | None = None
            async for ev, t_ev in job.events():
                if ev.kind == "error" and bad is not None:  # a remask failed: trim what we had
                    self.counters["syntax_remask_failed"] += 1
                    log.info("remask of %s failed: %s", req.cid, ev.error)
                    return Settled(self.weigh.trim(bad[0], req), bad[1], bad[2])
                if ev.kind == "error":
                    self.counters["engine_errors"] += 1
                    log.warning("engine error for %s: %s", req.cid, ev.error)
                    return f"engine error: {ev.error}"
                if ev.kind == "done" and ev.reason in ("cancelled", "superseded"):
                    return f"engine request {job.cancel_reason or ev.reason}"
                done = ev.kind == "done"
                if not done and (until_done or not ev.draft_complete):
                    continue
                text = self.weigh.clean(ev.text, req)
                chosen = 0
                others: tuple[str, ...] = ()
                if done and ev.alternatives:
                    text, chosen, others = self.weigh.pick(ev, req, text)
                if not text and not done:
                    continue  # an empty draft: wait for the edits
                if not wanted():
                    job.cancel("superseded")
                    return "document changed while drafting"
                spans = self.weigh.new_errors(req, text)
                if spans and not done:
                    continue  # the engine's own edits may fix it; else remask at the end
                if not done and self.weigh.line_awaits_alternatives(req, text):
                    continue  # a broken line with candidates coming: show the one that fits
                req.engine_ms += (t_ev - job.submitted_at) * 1000
                if spans and chosen == 0 and self.caps.remask and passes < self.options.syntax_remask_passes \
                        and remask_can_help(text, spans, bad[0] if bad is not None else None):
                    nxt = self.engine.remask(job, raw_spans(ev.text, text, spans))
                    if nxt is not None:
                        passes += 1
                        self.counters["syntax_remasks"] += 1
                        bad = (text, job, ev)
                        break
                if spans:
                    self.counters["syntax_unfixed"] += 1
                    text = self.weigh.trim(text, req)
                elif passes:
                    self.counters["syntax_fixed"] += 1
                return Settled(text, job, ev, others)
            if nxt is None:
                return "engine stream ended"
            if not req.speculative and self.jobs.get(req.uri) is job:
                self.jobs[req.uri] = nxt  # a newer request cancels the remask
            job = req.job = nxt

    def finish(self, req: Request, ev: EngineEvent, final_text: str | None,
                others: tuple[str, ...] = ()) -> None:
        self.report.finished(req.stats, ev)
        if final_text is not None and ev.reason not in ("cancelled", "superseded", "error"):
            self.cache.put(req.key, final_text, tuple(o for o in others if o != final_text),
                           req.candidates)

    # -- answers without the engine --------------------------------------------------------------
    def _show(self, uri: str, cid: str, doc_text: str, offset: int, text: str, kind: str,
              others: tuple[str, ...] = ()) -> None:
        shown = remember(cid, doc_text, offset, text, kind)
        self.shown[uri] = shown
        self.recent[cid] = (uri, shown, (text, *others))
        while len(self.recent) > 64:
            self.recent.popitem(last=False)

    def _serve_known(self, doc: Document, offset: int, cid: str, text: str, source: str,
                     t0: float, kind: str | None = None, others: tuple[str, ...] = (),
                     lead: str = "", tail: str = "") -> Answer:
        shown = self.shown.get(doc.uri)
        kind = kind or (shown.kind if shown is not None else "line")
        self._show(doc.uri, cid, doc.text, offset, text, kind, others)
        self.counters[source] += 1
        final = self.report.known(cid, doc.uri, doc.version, kind, source, lead + fit(text, tail), t0)
        task = asyncio.current_task()
        if task is not None:  # every completion ends with one final llada/refine
            task.add_done_callback(lambda _: final())
        else:
            final()
        ls = doc.text.rfind("\n", 0, offset) + 1
        return Answer(cid, text, kind, offset, word_before(doc.text[ls:offset]), source, others, tail)

    def _nothing(self, why: str) -> None:
        self.counters["empty"] += 1
        self.empty_reasons[why.split(":", 1)[0].split(" (", 1)[0]] += 1
        self.last_empty = why
        log.debug("no completion: %s", why)
        return None

    # -- accepts and speculation ------------------------------------------------------------------
    def accepted(self, cid: str, index: int = 0) -> None:
        """The client accepted candidate `index` (0: the first answer) of completion `cid`."""
        self.counters["accepted"] += 1
        if index > 0:
            self.counters["accepted_other_candidate"] += 1
        if self.options.speculative:
            self.speculator.accepted(cid)

    def document_changed(self, uri: str, lines: tuple[int, ...] = ()) -> None:
        """`uri` changed (at these lines, 0-based, where the client said)."""
        self.speculator.document_changed(uri)
        self.workspace.edited(uri, lines)

    def document_closed(self, uri: str) -> None:
        self.shown.pop(uri, None)
        self.name_hints.forget(uri)
        self.workspace.closed(uri)
        self.speculator.document_changed(uri, closed=True)
        job = self.jobs.pop(uri, None)
        if job is not None:
            job.cancel("closed")

    def debug_info(self) -> dict[str, Any]:
        return {"counters": dict(self.counters), "engine": dict(self.engine.counters),
                "engineState": self.engine.state, "engineError": self.engine.error,
                "engineInfo": self.engine.info, "running": self.engine.running(),
                "cache": {"size": len(self.cache), "hits": self.cache.hits,
                          "misses": self.cache.misses},
                "refining": len(self.refiner.tasks), "speculating": self.speculator.running(),
                "emptyReasons": [{"reason": r, "count": n}
                                 for r, n in self.empty_reasons.most_common()],
                "lastEmptyReason": self.last_empty,
                "lastPlan": dict(self.last_plan), "workspaceContext": self.workspace.info()}
