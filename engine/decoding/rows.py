"""The step loop's rows and endings: which request holds which KV-cache row, the running
requests by key, the finished ones a remask can reach, and how a request
leaves (done, failed, refused) or gives its row up (an alternative first, then another
connection's newest request: fair rows). `engine.decoding.scheduler.Scheduler` is the loop around it.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Hashable

from engine.api import CompletionRequest, DoneReason, EngineEvent
from engine.decoding.alternatives import fork_tokens, group_stats
from engine.decoding.batch import new_slot_attrs
from engine.decoding.host import Host
from engine.decoding.jobs import Job, Key, fair_share_victim
from engine.decoding.rejections import Rejection, RejectKind, rejection_of

log = logging.getLogger(__name__)

FINISHED_KEPT = 64  # finished requests a remask can still reach (their sequences hold the state)


class Rows:
    def __init__(self, engine: Host, max_batch: int, keep_finished: int = FINISHED_KEPT) -> None:
        self.engine, self.max_batch = engine, max_batch
        self.free_rows = list(range(max_batch - 1, -1, -1))
        self.running: dict[Key, Job] = {}
        self.finished: OrderedDict[Key, Job] = OrderedDict()  # kept for remask
        self.keep_finished = keep_finished
        self.counters: dict[str, float] = {
            "submitted": 0, "completed": 0, "cancelled": 0, "deadline": 0,
            "errors": 0, "busy": 0, "preempted": 0, "steps": 0, "forwards": 0, "batched_rows": 0,
            "max_batch_seen": 0, "forward_ms": 0.0, "interrupted": 0}

    # -- alternatives --------------------------------------------------------------------------
    def _spawn_forks(self, job: Job) -> None:
        assert job.seq is not None and isinstance(job.req, CompletionRequest)
        n = job.req.plan.alternatives or 1  # decided when it entered the loop (engine.api.decided)
        if job.seq.first_logits is None or n < 2:
            return
        for i, tok in enumerate(fork_tokens(job.seq.first_logits, n)):
            if not self.free_rows:
                return
            row = self.free_rows.pop()
            req = CompletionRequest(f"{job.req.request_id}\0alt{i}", job.req.doc_key, "", "", job.req.plan)
            fork = Job(req, job.owner, lambda ev, code: None, job.deadline, parent=job, row=row)
            try:
                with self.engine.prompt_cache.scoped(job.owner):
                    fork.seq = self.engine.fork(job.req, tok, row, job.policy)
            except Exception:  # noqa: BLE001 - the request goes on without its alternatives
                log.exception("an alternative of %s failed to start", job.req.request_id)
                self._release(fork)
                return
            fork.seq.tally = job.seq.tally  # the request's forwards count its forks' steps
            fork.attrs = new_slot_attrs(self.engine.max_len, fork.seq.clean_len)
            job.forks.append(fork)
            self.running[fork.key] = fork

    def _preempt_fork(self) -> None:
        forks = [j for j in self.running.values() if j.parent is not None]
        if forks:
            self._release(forks[-1])

    def _preempt_for(self, owner: Hashable) -> None:
        """Every row is taken: another connection's newest request may give its row up to
        `owner` (`engine.decoding.jobs.fair_share_victim`); it ends with a `busy` error: retry."""
        victim = fair_share_victim(self.running.values(), owner)
        if victim is None:
            return
        self.counters["preempted"] += 1
        self._release(victim)
        for f in victim.forks:
            self._release(f)
        self._reject(victim, Rejection(RejectKind.BUSY, "busy: the row was given to another connection "
                                       "(rows are shared fairly between connections); retry later"))

    def _fail_row(self, job: Job, e: BaseException) -> None:
        """A row failed in its update: a request fails alone; an alternative is dropped."""
        if job.parent is None:
            self._fail(job, e)
            return
        log.error("an alternative of %s failed: %s: %s", job.req.request_id, type(e).__name__, e, exc_info=e)
        assert job.seq is not None
        job.seq.reason = "cancelled"
        self._release(job)

    def _stores_prompt(self, job: Job) -> bool:
        """Whether this forward of `job` is the one whose update stores its prompt's KV."""
        return bool(self.engine.exact_cache) and job.seq is not None and job.seq.forwards == 0 and \
            job.op != "remask" and job.parent is None

    def _store_prompt(self, job: Job) -> None:
        """The prompt's KV in the prompt cache (an approximate cache's KV is useless later)."""
        if self.engine.exact_cache and job.seq is not None:
            self.engine.prompt_cache.store(self.engine.model, job.row, job.doc, job.seq.prompt, owner=job.owner)

    # -- endings -------------------------------------------------------------------------------
    def _release(self, job: Job) -> None:
        self.running.pop(job.key, None)
        if job.row >= 0:
            self.free_rows.append(job.row)
            self.free_rows.sort(reverse=True)  # the lowest free row is taken first
            job.row = -1

    def _finish(self, job: Job, reason: DoneReason | None) -> None:
        """End a running request with a done event (reason None: its own, it finished); a
        fork just gives its row back."""
        self._release(job)
        if job.parent is not None:
            return
        for f in job.forks:
            self._release(f)
        assert job.seq is not None and job.stream is not None
        tev = job.seq.finish_event(reason)  # type: ignore[arg-type]
        steps = max(1, job.seq.forwards)
        forks = [f.seq for f in job.forks if f.seq is not None and f.seq.done() and f.seq.reason != "cancelled"]
        extra = {"avg_batch": job.batch_sum / steps, "row_wait_ms": job.stream.queue_ms}
        if job.forks:
            extra |= group_stats(job.seq, forks)
        done = job.stream.finish(tev, extra, forks if reason is None else None)
        if reason is None:
            self.counters["completed"] += 1
        elif reason in ("cancelled", "deadline"):
            self.counters[reason] += 1
        self.finished[job.key] = job
        while len(self.finished) > self.keep_finished:
            self.finished.popitem(last=False)
        self._send(job, done, None)

    def _fail(self, job: Job, e: BaseException) -> None:
        log.error("request %s failed: %s: %s", job.req.request_id, type(e).__name__, e, exc_info=e)
        self._release(job)
        self._reject(job, rejection_of(e))

    def _reject(self, job: Job, why: Rejection) -> None:
        self.counters["errors"] += why.kind is not RejectKind.BUSY
        self._send(job, EngineEvent("error", job.req.request_id, "", error=why.message), why)

    def _send(self, job: Job, ev: EngineEvent, why: Rejection | None) -> None:
        try:
            job.emit(ev, why)
        except Exception:  # noqa: BLE001 - a broken listener must not stop the model thread
            log.exception("emitting to %s failed", job.owner)


def request_key(job: Job) -> Key:
    """The request a row decodes for: its own key, an alternative's parent's (cancels name it)."""
    return job.parent.key if job.parent is not None else job.key
