"""After the first answer: the engine's later events of a completion become `llada/refine`
notifications (cleaned and checked as the answer was: one that would add a parse error is
not sent, the text shown stays), then one final refinement and the
`llada/stats` of the completion. The done event's candidates are weighed again here: the
one shown at the end is the first that fits, and all that fit go into the suggestion cache.
`Refiner.finish` records a finished completion (its stats, the cache), for the service's
first answer too.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from engine.api import EngineEvent
from llada_lsp.completion.answers import InFlight
from llada_lsp.completion.cache import Shown, SuggestionCache
from llada_lsp.completion.line_rest import fit
from llada_lsp.completion.reporting import Reporter
from llada_lsp.completion.weighing import Weigher
from llada_lsp.engines.engine_base import STOPPED, EngineJob


class Refiner:
    """`shown`: uri -> the suggestion shown there (refined in place); `cache`: the
    suggestion cache a finished completion's texts go into."""

    def __init__(self, weigh: Weigher, report: Reporter, shown: Mapping[str, Shown],
                 cache: SuggestionCache) -> None:
        self.weigh, self.report, self.shown, self.cache = weigh, report, shown, cache
        self.tasks: set[asyncio.Task[None]] = set()

    def finish(self, req: InFlight, ev: EngineEvent, final_text: str | None,
               others: tuple[str, ...] = ()) -> None:
        """Record a finished completion: its stats from the done event `ev`, and its final
        text (None: it ended early) with the other candidates in the suggestion cache."""
        self.report.finished(req.stats, ev)
        if final_text is not None and ev.reason not in (*STOPPED, "error"):
            self.cache.put(req.key, final_text, tuple(o for o in others if o != final_text),
                           req.candidates)

    def start(self, handler: asyncio.Future[Any], job: EngineJob, req: InFlight, text: str) -> None:
        """Once the answer's handler is done: refine `text` (what was answered) unless the
        request was cancelled; a job already done only sends the final refinement."""
        if handler.cancelled() or req.stats.get("done"):
            if req.stats.get("done"):
                self.send_final(req, text, text, step=req.stats.get("forwards", 0))
            return
        task = asyncio.ensure_future(self.run(job, req, text))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def run(self, job: EngineJob, req: InFlight, shown: str) -> None:
        last = shown
        async for ev, _t in job.events():
            if ev.kind == "error":
                self.send_final(req, last, last, ev.step, reason="error")
                return
            if ev.kind == "done" and ev.reason in ("cancelled", "superseded"):
                self.send_final(req, last, last, ev.step, reason=ev.reason)
                self.finish(req, ev, None, ())
                return
            new = self.weigh.clean(ev.text, req) if ev.text or ev.kind != "done" else last
            others: tuple[str, ...] = ()
            if ev.kind == "done" and ev.alternatives:
                new, _i, others = self.weigh.pick(ev, req, new)
            if new != last and req.guard.breaks(new):
                self.weigh.counters["refine_withheld"] += 1
                new = last  # a refinement that would break the code is not sent
            if ev.kind == "done":
                self.finish(req, ev, new, others)
                self.send_final(req, last, new, ev.step)
                return
            if new != last:
                self.send(req, last, new, ev.step, final=False)
                last = new

    def send(self, req: InFlight, old: str, new: str, step: int, final: bool,
             reason: str | None = None) -> None:
        shown = self.shown.get(req.uri)
        if shown is not None and shown.completion_id == req.cid:
            shown.refine(new)
        self.report.refine(req.cid, req.uri, req.version, req.lead + fit(old, req.rest),
                           req.lead + fit(new, req.rest), step, final, reason)

    def send_final(self, req: InFlight, old: str, new: str, step: int,
                   reason: str | None = None) -> None:
        self.send(req, old, new, step, final=True, reason=reason)
        self.report.stats(req, "engine")
