"""Settling an engine job: read its events until a text is worth showing.

A request's first complete draft (its final text, when the caller waits for it) is cleaned
(`llada_lsp.completion.weighing`); one that the guard (`llada_lsp.completion.guard`) says adds a
parse error, of any plan kind, waits for the engine's own edits and candidates, then has the
error's tokens sent back for re-masking (syntax-guided edit: up to `syntax_remask_passes`
engine passes, while a pass may help), and is cut to the longest prefix that parses when
that does not fix it. Among alternatives the first candidate that
fits is the one shown (`Weigher.pick`). An answer that came out empty from fewer candidates
is decoded again with `rescue_alternatives` of them (`Settler.rescue`). The completion
service settles its requests and its speculations here.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import replace

from engine.api import CompletionRequest, EngineEvent
from llada_lsp.completion.answers import InFlight, Settled, capture
from llada_lsp.completion.plans import header_plan, only_header
from llada_lsp.completion.postprocess import raw_spans, remask_can_help
from llada_lsp.completion.weighing import Weigher
from llada_lsp.engines.capabilities import Capabilities
from llada_lsp.engines.engine_base import EngineClient, EngineJob
from llada_lsp.options import Options
from llada_lsp.text.documents import Document

log = logging.getLogger(__name__)


class Settler:
    """Drives engine jobs to their answer. A remask, rescue or header body is a newer job of the
    request's document: the engine client's rule (`EngineClient.supersede`) lets a newer
    request end it, as it would the first."""

    def __init__(self, engine: EngineClient, options: Options, weigh: Weigher,
                 counters: Counter[str]) -> None:
        self.engine, self.options, self.weigh = engine, options, weigh
        self.counters = counters

    async def settle(self, job: EngineJob, req: InFlight, wanted: Callable[[], bool],
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
                    job.cancel("document changed")  # its answer is stale
                    return "document changed while drafting"
                spans = self.weigh.new_errors(req, text)
                if spans and not done:
                    continue  # the engine's edits or candidates may fix it; else remask at the end
                req.engine_ms += (t_ev - job.submitted_at) * 1000
                if spans and chosen == 0 and self.caps().remask and passes < self.options.syntax_remask_passes \
                        and remask_can_help(text, spans, bad[0] if bad is not None else None):
                    nxt = self.engine.remask(job, raw_spans(ev.text, text, spans))
                    if nxt is not None:
                        passes += 1
                        self.counters["syntax_remasks"] += 1
                        bad = (text, job, ev)
                        break
                header = ""
                if spans:
                    self.counters["syntax_unfixed"] += 1
                    if req.plan.kind == "line" and not req.rest and only_header(req.spec.left, text, req.language_id):
                        header = text
                    text = self.weigh.trim(text, req)
                elif passes:
                    self.counters["syntax_fixed"] += 1
                return Settled(text, job, ev, others, header, cut=bool(spans))
            if nxt is None:
                return "engine stream ended"
            job = req.job = nxt

    def caps(self) -> Capabilities:
        return self.engine.caps  # built once per engine info (EngineClient.caps)

    async def rescue(self, empty: Settled, req: InFlight, wanted: Callable[[], bool]) -> Settled:
        """An answer that came out empty (or that the guard cut), from fewer than
        `rescue_alternatives` candidates: decode that many (the prompt is in the engine's
        prompt cache) and settle on the first that fits. Returns `empty` when that finds
        nothing (or is off)."""
        n, plan = min(self.options.rescue_alternatives, self.caps().alternatives), empty.job.completion.plan
        if n <= req.candidates or not wanted():
            return empty
        self.counters["empty_rescues"] += 1
        req.candidates = n
        job = self.engine.submit(CompletionRequest(req.cid, req.uri, req.plan.prefix, req.plan.suffix,
                                                   replace(plan, alternatives=n), empty.job.request.context,
                                                   empty.job.completion.names))
        req.job = job
        out = await self.settle(job, req, wanted, until_done=True)
        if isinstance(out, str) or not out.text or (out.cut and empty.text):
            return empty
        self.counters["empty_rescued"] += 1
        return out

    async def extend(self, out: Settled, req: InFlight, doc: Document, wanted: Callable[[], bool]) -> Settled:
        """A line answer withheld because it only opens a block (`out.header`, e.g. `def
        f(x):` with nothing under it): decode its body as a block span after it
        (`plans.header_plan`) and offer the header with its body as one block suggestion,
        when that passes the guard. Returns `out` otherwise. `doc`: the document of `req`."""
        if not out.header or req.lead or not wanted() or doc.text != req.doc_text:
            return out
        plan = header_plan(req.doc_text, req.offset, out.header, req.language_id, self.options)
        if plan is None or plan.engine_plan is None:
            return out
        self.counters["header_bodies"] += 1
        body_doc = doc.replaced(req.offset, req.offset, out.header)
        at = req.offset + len(out.header)
        body_req = capture(body_doc, at, req.cid, plan, req.key, body_doc.syntax_tree(), req.t0,
                           syntax_check=self.options.syntax_check, speculative=req.speculative)
        job = self.engine.submit(CompletionRequest(req.cid, req.uri, plan.prefix, plan.suffix, plan.engine_plan,
                                                   out.job.request.context))
        req.job = job
        body = await self.settle(job, body_req, wanted, until_done=True)
        if isinstance(body, str) or not body.text.strip():
            return out
        whole = req.guard.cut(out.header + body.text)
        if not whole.startswith(out.header + "\n"):
            return out
        self.counters["header_bodies_shown"] += 1
        return Settled(whole, job, body.event, kind=plan.kind)
