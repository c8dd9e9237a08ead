"""After the first answer: the engine's later events of a completion become `llada/refine`
notifications (cleaned and checked as the answer was), then one final refinement and the
`llada/stats` of the completion. The done event's candidates are weighed again here: the
one shown at the end is the first that fits, and all that fit go into the suggestion cache.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from llada_lsp.answers import Request
from llada_lsp.engine_client import EngineJob

if TYPE_CHECKING:
    from llada_lsp.completions import CompletionService


class Refiner:
    def __init__(self, svc: CompletionService) -> None:
        self.svc = svc
        self.tasks: set[asyncio.Task[None]] = set()

    def start(self, handler: asyncio.Future[Any], job: EngineJob, req: Request, text: str) -> None:
        """Once the answer's handler is done: refine `text` (what was answered) unless the
        request was cancelled; a job already done only sends the final refinement."""
        if handler.cancelled() or req.stats.get("done"):
            if req.stats.get("done"):
                self.send_final(req, text, text, step=req.stats.get("forwards", 0))
            return
        task = asyncio.ensure_future(self.run(job, req, text))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def run(self, job: EngineJob, req: Request, shown: str) -> None:
        last = shown
        async for ev, _t in job.events():
            if ev.kind == "error":
                self.send_final(req, last, last, ev.step, reason="error")
                return
            new = self.svc.weigh.checked(ev.text, req) if ev.text or ev.kind != "done" else last
            others: tuple[str, ...] = ()
            if ev.kind == "done" and ev.alternatives and ev.reason not in ("cancelled", "superseded"):
                new, _i, others = self.svc.weigh.pick(ev, req, self.svc.weigh.clean(ev.text, req))
                new = self.svc.weigh.trim(new, req) if self.svc.weigh.new_errors(req, new) else new
            if ev.kind == "done" and ev.reason in ("cancelled", "superseded"):
                self.send_final(req, last, last, ev.step, reason=ev.reason)
                self.svc.finish(req, ev, None)
                return
            if ev.kind == "done":
                self.svc.finish(req, ev, new, others)
                self.send_final(req, last, new, ev.step)
                return
            if new != last:
                self.send(req, last, new, ev.step, final=False)
                last = new

    def send(self, req: Request, old: str, new: str, step: int, final: bool,
             reason: str | None = None) -> None:
        shown = self.svc.shown.get(req.uri)
        if shown is not None and shown.completion_id == req.cid:
            shown.refine(new)
        self.svc.report.refine(req.cid, req.uri, req.version, req.lead + old, req.lead + new,
                               step, final, reason)

    def send_final(self, req: Request, old: str, new: str, step: int,
                   reason: str | None = None) -> None:
        self.send(req, old, new, step, final=True, reason=reason)
        self.svc.report.stats(req, "engine")
