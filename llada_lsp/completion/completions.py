"""The completion pipeline. `CompletionService.complete` is one linear recipe of named steps:
arrive -> should_complete -> typed_through -> plan -> known_answer -> prepare -> engine_answer;
each gives the next what it needs, or a `Verdict` (an answer, or none and why) that ends it.

The newest request for a document wins: its arrival ends the older one's engine job, by the
engine client's one rule (`EngineClient.supersede`; the service keeps no jobs). Engine jobs
are settled in `llada_lsp.completion.settling` (the first complete draft that adds no parse error,
alternatives weighed; an empty answer rescued with more candidates). An Invoked request
waits for the candidates and answers all that fit (cycling). The engine's later edits go out
as `llada/refine` notifications, then one `llada/stats` notification. After an accept,
`llada_lsp.completion.speculation` asks for the next completion ahead of time.
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

from engine.api import CompletionRequest, ContextChunk, Names, Plan
from llada_lsp.completion.answers import (
    Answer,
    Cursor,
    InFlight,
    Selected,
    Verdict,
    capture,
    word_before,
)
from llada_lsp.completion.cache import Shown, SuggestionCache, key_of, remember, type_through
from llada_lsp.completion.guard import Guard
from llada_lsp.completion.line_rest import fit, rest_of_line
from llada_lsp.completion.plans import InfillPlan, make_plan
from llada_lsp.completion.refining import Refiner
from llada_lsp.completion.reporting import Reporter
from llada_lsp.completion.settling import Settler
from llada_lsp.completion.speculation import Ahead, Speculator
from llada_lsp.completion.weighing import Weigher
from llada_lsp.context.name_hints import NameHints
from llada_lsp.context.workspace import WorkspaceContext, gather_limit
from llada_lsp.engines.capabilities import Capabilities
from llada_lsp.engines.engine_base import EngineClient, EngineJob
from llada_lsp.options import Options
from llada_lsp.text.documents import Document, DocumentStore
from llada_lsp.text.positions import Encoding, selected_span

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
        self.refiner = Refiner(self.weigh, self.report, self.shown, self.cache)
        self.settler = Settler(engine, options, self.weigh, self.counters)
        self.speculator = Speculator(store, self.cache, options, self.counters, self.recent,
                                     lambda: self.engine.ready, self.decode_ahead)

    @property
    def caps(self) -> Capabilities:
        """What the engine can do (`llada_lsp.engines.capabilities`, the engine's, built once per
        info): without edit events the answer is the finished text and no `llada/refine`
        follows; without remask or alternatives none is asked for."""
        return self.engine.caps

    # -- the request: one linear recipe ------------------------------------------------------
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
        at = self.should_complete(self.arrive(uri, line, character, t0, invoked, selected))
        if isinstance(at, Verdict):
            return self.end(at)
        await at.doc.parsed()  # its tree brought up to date on a thread: a large file's parse never holds the loop
        typed = self.typed_through(at)
        if typed is not None:
            return self.end(typed)
        plan = self.plan(at)
        if isinstance(plan, Verdict):
            return self.end(plan)
        known = await self.known_answer(at, plan)
        if known is not None:
            return self.end(known)
        req = await self.prepare(at, plan)
        if isinstance(req, Verdict):
            return self.end(req)
        return self.end(await self.engine_answer(at, plan, req))

    def arrive(self, uri: str, line: int, character: int, t0: float, invoked: bool,
               selected: Selected | None) -> Cursor:
        """Number the request; the older engine job of its document ends (the newest wins: the
        engine client's rule; a speculation this request may be answered from goes on). A
        position past the end, or a selected item's range past it, is an error
        (`PositionError`: Invalid Params)."""
        doc = self.store.get(uri)
        enc = self.encoding()
        offset = doc.request_offset(line, character, enc)
        span = selected_span(doc.index, selected.start, selected.end, enc) if selected is not None else None
        serial = next(self.serial)
        self.latest[uri] = serial
        self.counters["requests"] += 1
        self.engine.supersede(uri, spare_ahead=True)
        return Cursor(uri, serial, t0, invoked, doc, offset, doc, offset, selected, span)

    def should_complete(self, at: Cursor) -> Cursor | Verdict:
        """Whether this document is served here, and where to complete: with a selected item,
        on the document as it would be with the item accepted (the cursor after its text)."""
        doc = at.real
        why = doc.refusal(self.options.language_enabled(doc.language_id))  # next edits make the same check
        if why is not None:
            return Verdict(None, why)
        if self.workspace.secret(doc.uri):  # llada_lsp.context.exclusions: a .env, a key, the user's `exclude`
            return Verdict(None, "excluded: a secret file (its text is never sent)")
        item, span = at.selected, at.span
        if item is None or span is None:
            return replace(at, tail=rest_of_line(doc.text, at.offset))
        self.counters["selected_item"] += 1
        doc = doc.replaced(*span, item.text)
        why = doc.unservable_reason()  # the selected item's text may be huge or binary
        if why is not None:
            return Verdict(None, f"with the selected item, {why}")
        return replace(at, doc=doc, offset=span[0] + len(item.text), lead=item.text)

    def typed_through(self, at: Cursor) -> Verdict | None:
        """The shown suggestion's rest, when the user typed what it predicted."""
        rest = type_through(self.shown.get(at.uri), at.doc.text, at.offset)
        if rest is None:
            return None
        if self.guard_at(at).breaks(rest):
            self.counters["guard_withheld"] += 1
            return None  # its rest would break the code as it is now: ask afresh
        return Verdict(self._serve_known(at.doc, at.offset, at.cid, rest, "type_through", at.t0,
                                         lead=at.lead, tail=at.tail))

    def plan(self, at: Cursor) -> InfillPlan | Verdict:
        """What to ask the engine for here (`llada_lsp.completion.plans`); none inside an identifier."""
        at.tree = at.doc.syntax_tree()
        plan = make_plan(at.doc.text, at.offset, at.doc.language_id, self.options, tree=at.tree,
                         index=at.doc.index)
        self.last_plan = {"uri": at.uri, "kind": plan.kind, "reason": plan.reason,
                          "completionId": at.cid}
        if plan.kind == "none" or plan.engine_plan is None:
            return Verdict(None, plan.reason)
        at.key = key_of(plan.prefix, plan.suffix, plan.kind)
        return plan

    async def known_answer(self, at: Cursor, plan: InfillPlan) -> Verdict | None:
        """The suggestion cache's answer, or (automatic requests) the running speculation's,
        when it has what this request asks for."""
        key = at.key
        cached = self.cache.get(key)
        if cached is not None and at.invoked and self._wants_more(plan, key):
            cached = None  # asked for candidates the cache does not have
        if cached is None and not at.invoked:  # a speculation gives one candidate
            cached = await self.speculator.wait_for(key)
            if cached is not None:
                self.counters["speculative_wait"] += 1
            if self.latest.get(at.uri) != at.serial:
                return Verdict(None, "superseded while waiting for the speculation")
        if cached is None:
            return None
        if not cached:
            return Verdict(None, "cached: no suggestion")
        guard = self.guard_at(at)
        fitting = [c for c in dict.fromkeys((cached, *self.cache.others(key))) if guard.fits(c)]
        if not fitting:
            self.counters["guard_withheld"] += 1
            return None  # it would break the code as it is now (outside the cache key): ask afresh
        return Verdict(self._serve_known(at.doc, at.offset, at.cid, fitting[0], "cache", at.t0, plan.kind,
                                         tuple(fitting[1:]), at.lead, at.tail))

    def guard_at(self, at: Cursor) -> Guard:
        """The parse-error guard of an answer at `at` (inactive with `syntaxCheck` off)."""
        tree = (at.tree or at.doc.syntax_tree()) if self.options.syntax_check else None
        return Guard(at.doc.language_id, at.doc.text, at.offset, at.tail, tree)

    async def prepare(self, at: Cursor, plan: InfillPlan) -> InFlight | Verdict:
        """The request as the engine will get it, once the engine is ready and the debounce
        passed with no newer request; an Invoked one asks for `invoked_alternatives`."""
        if not self.engine.ready:
            return Verdict(None, f"engine {self.engine.state}")
        if self.options.debounce_ms > 0:
            await asyncio.sleep(self.options.debounce_ms / 1000)
            if self.latest.get(at.uri) != at.serial:
                return Verdict(None, "superseded while debouncing")
        req = capture(at.doc, at.offset, at.cid, plan, at.key, at.tree, at.t0,
                      syntax_check=self.options.syntax_check, rest=at.tail)
        req.lead = at.lead
        if at.invoked and self._wants_more(plan, at.key):
            req.candidates = self.options.invoked_alternatives
            self.counters["invoked"] += 1
        return req

    async def engine_answer(self, at: Cursor, plan: InfillPlan, req: InFlight) -> Verdict:
        """Submit the request and settle on its first answer; its refinements follow the
        response (`llada_lsp.completion.refining`)."""
        assert plan.engine_plan is not None
        engine_plan = replace(plan.engine_plan, alternatives=req.candidates)  # an Invoked one's more
        job = self.submit(at.cid, at.real, at.real_offset, plan, engine_plan, at.doc, at.offset, at.tree)
        req.job = job
        try:
            return await self.first_answer(job, req, at.real, until_done=at.invoked or not self.caps.edits)
        except asyncio.CancelledError:
            (req.job or job).cancel("cancelled")  # a remask's job, if one runs
            self.counters["client_cancelled"] += 1
            raise

    def end(self, verdict: Verdict) -> Answer | None:
        """The request's answer; none is counted with its reason."""
        if verdict.answer is None:
            why = verdict.why
            self.counters["empty"] += 1
            self.empty_reasons[why.split(":", 1)[0].split(" (", 1)[0]] += 1
            self.last_empty = why
            log.debug("no completion: %s", why)
        return verdict.answer

    def submit(self, cid: str, real: Document, real_offset: int, plan: InfillPlan, engine_plan: Plan,
               doc: Document, offset: int, tree: Any) -> EngineJob:
        """An engine job for `plan`: with the workspace context around `real_offset` of the
        document as the editor has it, and the names known at `offset` of `doc` (the document
        completed: with a selected item's text in place)."""
        context = self.context_for(real, real_offset, plan)
        return self.engine.submit(CompletionRequest(cid, doc.uri, plan.prefix, plan.suffix, engine_plan,
                                                    context, self.names_for(doc, offset, tree)))

    def decode_ahead(self, ahead: Ahead) -> Awaitable[str | None]:
        """A speculation: submitted now; its final text (settled, rescued when empty, as a
        request's would be) goes into the suggestion cache."""
        req = capture(ahead.doc, ahead.offset, ahead.cid, ahead.plan, ahead.key, ahead.tree,
                      ahead.t0, syntax_check=self.options.syntax_check, speculative=True)
        assert ahead.plan.engine_plan is not None
        job = self.submit(ahead.cid, ahead.doc, ahead.offset, ahead.plan, ahead.plan.engine_plan,
                          ahead.doc, ahead.offset, ahead.tree)
        job.ahead = True  # the next request's arrival spares it: it may be answered from it
        version, revision, doc = ahead.doc.version, ahead.doc.revision, ahead.doc

        def wanted() -> bool:
            return doc.version == version and doc.revision == revision

        async def run() -> str | None:
            out = await self.settler.settle(job, req, wanted, until_done=True)
            if not isinstance(out, str) and out.header:
                out = await self.settler.extend(out, req, doc, wanted)
            if not isinstance(out, str) and (not out.text or out.cut):
                out = await self.settler.rescue(out, req, wanted)  # as a request would be
            if isinstance(out, str):
                log.debug("speculation %s: nothing (%s)", req.cid, out)
                return None
            self.cache.put(ahead.key, out.text, out.others, req.candidates)
            return out.text

        return run()

    def context_for(self, doc: Document, offset: int, plan: InfillPlan) -> tuple[ContextChunk, ...]:
        """The workspace context of a request, gathered and ranked (llada_lsp.context.workspace; the
        engine places what fits its budget); () when the option is off."""
        if not self.options.workspace_context:
            self.workspace.note(doc.uri, (), False)
            return ()
        limit = gather_limit(self.options.context_tokens, self.engine.info.get("max_context_tokens"))
        return self.workspace.chunks_for(doc, offset, plan.prefix + plan.suffix, limit)

    def names_for(self, doc: Document, offset: int, tree: Any) -> Names | None:
        """The known names for the identifier at the cursor (llada_lsp.context.name_hints), when the
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
        assert plan.engine_plan is not None
        wanted = min(self.options.invoked_alternatives, self.caps.alternatives)
        return wanted > max(plan.candidates, self.cache.decoded(key))

    async def first_answer(self, job: EngineJob, req: InFlight, doc: Document, until_done: bool) -> Verdict:
        """The settled text of `job` (rescued when it came out empty), shown; refining it
        starts once the response is written (the handler task's callbacks run in order)."""
        def wanted() -> bool:
            return doc.version == req.version and doc.revision == req.revision and \
                self.latest.get(req.uri) == int(req.cid)

        out = await self.settler.settle(job, req, wanted, until_done=until_done)
        if not isinstance(out, str) and out.header:
            out = await self.settler.extend(out, req, doc, wanted)
        if not isinstance(out, str) and out.event.kind == "done" and (not out.text or out.cut):
            out = await self.settler.rescue(out, req, wanted)
        if isinstance(out, str):
            return Verdict(None, out)
        text, job, ev, kind = out.text, out.job, out.event, out.kind or req.plan.kind
        total = (time.perf_counter() - req.t0) * 1000
        req.stats.update(firstMs=total, overheadMs=max(0.0, total - req.engine_ms))
        if ev.kind == "done":
            self.refiner.finish(req, ev, text, out.others)
            if not text:
                why = req.note or "nothing left"
                self.report.stats(req, "engine", shown=False, empty=why)
                return Verdict(None, f"empty after post-processing ({why})")
        self._show(req.uri, req.cid, req.doc_text, req.offset, text, kind, out.others)
        self.counters["answered"] += 1
        task = asyncio.current_task()
        if task is not None:
            task.add_done_callback(lambda t: self.refiner.start(t, job, req, text))
        return Verdict(Answer(req.cid, text, kind, req.offset, word_before(req.spec.left),
                              "engine", out.others, req.rest))

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

    # -- accepts and speculation ------------------------------------------------------------------
    def accepted(self, cid: str, index: int = 0) -> None:
        """The client accepted candidate `index` (0: the first answer) of completion `cid`."""
        self.counters["accepted"] += 1
        if index > 0:
            self.counters["accepted_other_candidate"] += 1
        if self.options.speculative:
            self.speculator.accepted(cid)

    def document_opened(self, doc: Document) -> None:
        """`doc` opened: what its first completion would otherwise build at its keystroke."""
        if self.options.names_constraint and not doc.refusal(self.options.language_enabled(doc.language_id)):
            self.name_hints.warm(doc.language_id)
            self.counters["names_warmed"] += 1

    def document_changed(self, uri: str, lines: tuple[int, ...] = ()) -> None:
        """`uri` changed (at these lines, 0-based, where the client said)."""
        self.speculator.document_changed(uri)
        self.workspace.edited(uri, lines)

    def document_closed(self, uri: str) -> None:
        self.shown.pop(uri, None)
        self.name_hints.forget(uri)
        self.workspace.closed(uri)
        self.speculator.document_changed(uri, closed=True)
        self.engine.supersede(uri, "closed")

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
