"""The engine interface the language server uses: `EngineClient.submit(request)` returns an
`EngineJob` whose `events()` async-iterates the engine's text events. `job.cancel()` ends it
(between forwards).
Implementations: `llada_lsp.engines.engine_client.InProcessEngine` (the engine in a worker thread),
`llada_lsp.engines.ws_engine.WsEngineClient` (the resident daemon) and
`llada_lsp.engines.sglang_engine.SglangEngineClient` (SGLang servers); `engine_client.make_engine`
picks one. Torch-free.

The job bookkeeping is here, once for every client: `new_job` creates a job (its deadlines,
the older job of its document superseded), `start_job` counts it into the engine, `deliver`
hands it an event (its first done or error ends it: counted, no longer running), `release`
forgets it. A client only transports: it sends a job, cancels it on the wire (`send_cancel`)
and delivers what comes back.

Supersession is decided here and nowhere else: `supersede` is the one rule. Per document key,
the newest job of this client wins: a newer job (`new_job`) or a newer request announced before
its job (the services, at a request's arrival) ends the document's live job, cancelled on the
wire like any cancel. The engine below (the step loop, the daemon, SGLang) only cancels what it
is told; the services keep no jobs of their own to end.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from engine.api import CompletionRequest, EngineEvent
from llada_lsp.engines.capabilities import Capabilities
from llada_lsp.engines.pace import Pace

log = logging.getLogger(__name__)

Progress = Callable[[str, int], None]  # (message, percentage)
StateListener = Callable[[str, str], None]  # (state, message): the engine's state changed
TIMED_OUT = "timed out"  # the start of an error event's text when a deadline passed
END_KINDS = ("done", "error")  # the events that end a job
STOPPED = ("cancelled", "superseded")  # the done reasons of a job ended before its end


J = TypeVar("J", bound="EngineJob")


class EngineUnavailable(RuntimeError):
    """The engine could not be started or reached."""


@dataclass
class EngineJob:
    request: CompletionRequest
    loop: asyncio.AbstractEventLoop
    cancel_event: threading.Event = field(default_factory=threading.Event)
    cancel_reason: str = ""
    submitted_at: float = field(default_factory=time.perf_counter)
    started_at: float | None = None  # the engine began working on it
    finished: bool = False
    ran: bool = False  # it reached the engine (not skipped while queued)
    first_deadline_s: float | None = None  # its first event must arrive within this
    deadline_s: float | None = None  # and its last (done or error) within this
    on_timeout: Callable[[EngineJob], None] | None = None
    late_after_s: float | None = None  # no first event by then: `on_late` (the status says so)
    on_late: Callable[[EngineJob], None] | None = None
    on_cancel: Callable[[EngineJob], None] | None = None  # its client's cancel on the wire (on the loop)
    # decoded ahead of the request it may answer (a speculation): that request's arrival spares
    # it (`supersede(spare_ahead=True)`); a newer job of its document still ends it
    ahead: bool = False
    counted: bool = False  # counted among its document's running requests
    ended: bool = False  # its done or error event was delivered (`EngineClient.deliver`)
    seen_first: bool = False  # an event arrived: only the end deadline is left
    _queue: asyncio.Queue[tuple[EngineEvent, float]] = field(default_factory=asyncio.Queue)

    @property
    def doc_key(self) -> str:
        """The key jobs supersede by."""
        return self.request.doc_key

    @property
    def completion(self) -> CompletionRequest:
        """The job's completion request."""
        return self.request

    def cancel(self, reason: str = "cancelled") -> None:
        """From any thread: mark it cancelled; the first cancel of an unfinished job is sent on
        the wire (`on_cancel`, on the job's event loop)."""
        if self.cancel_event.is_set():
            return
        self.cancel_reason = reason
        self.cancel_event.set()
        if not self.finished and self.on_cancel is not None:
            self.call_on_loop(self.on_cancel, self)

    def call_on_loop(self, fn: Callable[..., Any], *args: Any) -> None:
        """`fn(*args)` now when called on the job's loop, else soon on it (a closed loop: never)."""
        try:
            on_loop = asyncio.get_running_loop() is self.loop
        except RuntimeError:
            on_loop = False
        if on_loop:
            fn(*args)
        else:
            with contextlib.suppress(RuntimeError):
                self.loop.call_soon_threadsafe(fn, *args)

    @property
    def cancelled(self) -> bool:
        return self.cancel_event.is_set()

    @property
    def done_reason(self) -> str:
        """The done reason of a cancelled job: superseded by a newer one, or cancelled."""
        return "superseded" if self.cancel_reason == "superseded" else "cancelled"

    def push(self, event: EngineEvent) -> None:
        """Called from any thread: hand one event to the awaiting coroutine."""
        item = (event, time.perf_counter())
        try:
            self.loop.call_soon_threadsafe(self._queue.put_nowait, item)
        except RuntimeError:  # the loop is closed: the server is shutting down
            pass

    def _wait_s(self) -> tuple[float | None, str]:
        """Seconds left before the next event is overdue (None: no deadline), and which."""
        now = time.perf_counter()
        waits: list[tuple[float, str]] = []
        if self.deadline_s is not None:
            waits.append((self.submitted_at + self.deadline_s - now, f"in {self.deadline_s:g} s"))
        if self.first_deadline_s is not None and not self.seen_first:
            waits.append((self.submitted_at + self.first_deadline_s - now,
                          f"with a first event in {self.first_deadline_s:g} s"))
        if not waits:
            return None, ""
        left, what = min(waits)
        return max(left, 0.0), what

    def _late_in_s(self) -> float | None:
        """Seconds until the first event is late (None: not waited for, or already told)."""
        if self.late_after_s is None or self.seen_first or self.on_late is None:
            return None
        return max(0.0, self.submitted_at + self.late_after_s - time.perf_counter())

    async def _next(self) -> tuple[EngineEvent, float]:
        """The next event, or an error event once a deadline has passed (the job is then
        cancelled, so that the engine drops it, and `on_timeout` is told)."""
        while True:
            left, what = self._wait_s()
            late = self._late_in_s()
            if late is None or (left is not None and left <= late):
                break
            try:
                item = await asyncio.wait_for(self._queue.get(), late)
            except TimeoutError:
                self.late_after_s = None  # told once
                if self.on_late is not None:
                    self.on_late(self)
                continue
            self.seen_first = True
            return item
        try:
            item = await asyncio.wait_for(self._queue.get(), left)
        except TimeoutError:
            self.cancel("timeout")
            self.finished = True
            if self.on_timeout is not None:
                self.on_timeout(self)
            return EngineEvent("error", self.request.request_id, "",
                               error=f"{TIMED_OUT}: the engine did not answer {what}"), time.perf_counter()
        self.seen_first = True
        return item

    async def events(self) -> AsyncIterator[tuple[EngineEvent, float]]:
        """(event, time it left the engine) until done or error; a passed deadline ends it
        with an error event."""
        while True:
            ev, t = await self._next()
            yield ev, t
            if ev.kind in END_KINDS:
                return


class EngineClient(ABC):
    """What the language server needs from an engine, wherever it runs, and the bookkeeping of
    its jobs, the same for every client (see the module docstring)."""

    def __init__(self) -> None:
        self.state = "idle"  # idle | loading | ready | error
        self.error: str | None = None
        self._info: dict[str, Any] = {}
        self._caps: Capabilities | None = None  # built from `_info` when first read after a change
        self.counters: dict[str, int] = {"submitted": 0, "engine_calls": 0, "skipped": 0,
                                         "cancelled": 0, "max_running_per_doc": 0, "timeouts": 0}
        # the floors of every request's deadlines (options engineFirstEventMs, engineTimeoutMs),
        # scaled by the measured pace of the model (llada_lsp.engines.pace)
        self.first_deadline_s: float | None = 10.0
        self.deadline_s: float | None = 30.0
        self.pace = Pace()
        self.on_state: StateListener | None = None
        self._latest: dict[str, EngineJob] = {}  # the newest job of each document
        self._live: dict[int, EngineJob] = {}  # jobs not released yet, by id() (unhashable)
        self._per_doc: dict[str, int] = {}  # jobs in the engine now, by document
        self._lock = threading.Lock()  # `deliver` may run on the engine's thread

    # -- what the engine is and can do: `info` (`llada/status`) is assigned, never changed in place
    @property
    def info(self) -> dict[str, Any]:
        return self._info

    @info.setter
    def info(self, info: dict[str, Any]) -> None:
        self._info, self._caps = info, None

    @property
    def caps(self) -> Capabilities:
        """What the engine can do (`llada_lsp.engines.capabilities`), as `info` says: built once per `info`."""
        if self._caps is None:
            self._caps = Capabilities.of(self._info)
        return self._caps

    # -- job bookkeeping ------------------------------------------------------------------------
    def new_job(self, request: CompletionRequest, job_type: type[J], **fields: Any) -> J:
        """A job of `request` on the running loop, with this client's deadlines and cancel
        (`send_cancel`); the older live job of its document is superseded. A later job of the
        same request (its remask, rescue or header body) continues it: ahead when it was."""
        job = job_type(request, asyncio.get_running_loop(), on_cancel=self.send_cancel, **fields)
        self.with_deadlines(job)
        older = self._latest.get(job.doc_key)
        if older is not None and older.request.request_id == request.request_id:
            job.ahead = older.ahead
        self.supersede(job.doc_key)
        self._latest[job.doc_key] = job
        self._live[id(job)] = job
        self.counters["submitted"] += 1
        return job

    def supersede(self, doc_key: str, reason: str = "superseded", spare_ahead: bool = False) -> None:
        """The one supersession rule: a newer job or request of document `doc_key` arrived (or
        the document went away: `reason`), so its live job ends: cancelled on the wire (the
        engine stops it before its next forward) and no longer running. `spare_ahead`: a job
        decoded ahead of the arriving request goes on (that request may be answered from it)."""
        older = self._latest.get(doc_key)
        if older is None or older.finished or (spare_ahead and older.ahead):
            return
        older.cancel(reason)
        self._count(older, False)

    def send_cancel(self, job: EngineJob) -> None:
        """The transport: tell the engine that `job` is cancelled (on the loop, once, while the
        job is unfinished). Nothing by default."""
        return None

    def start_job(self, job: EngineJob) -> None:
        """`job` reaches the engine now: an engine call, running for its document."""
        self.counters["engine_calls"] += 1
        job.ran, job.started_at = True, time.perf_counter()
        self._count(job, True)

    def deliver(self, job: EngineJob, ev: EngineEvent) -> None:
        """From any thread: hand `ev` to `job`. Its first done or error ends it (counted as
        cancelled when it was cancelled or superseded); later events are dropped."""
        if job.ended:
            return
        self._measure(job, ev)
        if ev.kind in END_KINDS:
            self._end(job, stopped=ev.reason in STOPPED)
            if ev.kind == "done" and ev.reason in STOPPED and job.cancelled:  # the engine heard "cancel":
                ev = replace(ev, reason=job.done_reason)  # type: ignore[arg-type]  # the client knows why
        job.push(ev)

    def _measure(self, job: EngineJob, ev: EngineEvent) -> None:
        """The model's pace from the engine's events: a done event's engine time over its
        forwards; while nothing is known yet, a draft's time since the job started."""
        st = ev.stats or {}
        if ev.kind == "done" and ev.reason not in STOPPED and st.get("forwards"):
            busy_ms = float(st.get("total_ms", 0.0)) - float(st.get("queue_ms", 0.0))
            self.pace.observe(busy_ms / 1000, int(st["forwards"]))
        elif ev.kind == "draft" and self.pace.s_per_step is None and ev.step >= 2 and job.started_at is not None:
            self.pace.observe(time.perf_counter() - job.started_at, ev.step)

    def end_cancelled(self, job: EngineJob, text: str = "") -> None:
        """End a cancelled job with a done event of its reason (superseded or cancelled)."""
        self.deliver(job, EngineEvent("done", job.request.request_id, text, reason=job.done_reason))  # type: ignore[arg-type]

    def fail(self, job: EngineJob, error: str, text: str = "") -> None:
        """End `job` with an error event."""
        self.deliver(job, EngineEvent("error", job.request.request_id, text, error=error))

    def skip(self, job: EngineJob) -> None:
        """End a job cancelled before it reached the engine: counted as skipped."""
        if not job.ended:
            self.counters["skipped"] += 1
            self._end(job, stopped=False)
            job.push(EngineEvent("done", job.request.request_id, "", reason=job.done_reason))  # type: ignore[arg-type]

    def release(self, job: EngineJob) -> None:
        """The transport is done with `job`: finished, no longer running nor live."""
        job.finished = True
        self._count(job, False)
        self._live.pop(id(job), None)

    def live(self) -> list[EngineJob]:
        """The jobs not released yet."""
        return list(self._live.values())

    def cancel_all(self, reason: str = "shutdown") -> None:
        for job in self.live():
            job.cancel(reason)

    def _end(self, job: EngineJob, stopped: bool) -> None:
        job.ended = job.finished = True
        if stopped:
            self.counters["cancelled"] += 1
        self._count(job, False)

    def _count(self, job: EngineJob, running: bool) -> None:
        """Count `job` among its document's running requests (once), or stop counting it."""
        with self._lock:
            if job.counted == running:
                return
            job.counted, key = running, job.doc_key
            n = self._per_doc[key] = self._per_doc.get(key, 0) + (1 if running else -1)
            if n <= 0:
                del self._per_doc[key]
            self.counters["max_running_per_doc"] = max(self.counters["max_running_per_doc"], n)

    def running(self) -> int:
        """Jobs in the engine now (started; not ended, superseded or released)."""
        return sum(self._per_doc.values())

    @property
    def ready(self) -> bool:
        return self.state == "ready"

    def set_deadlines(self, first_ms: int, total_ms: int) -> None:
        """Deadlines of the requests submitted from now on (0 = none)."""
        self.first_deadline_s = first_ms / 1000 if first_ms > 0 else None
        self.deadline_s = total_ms / 1000 if total_ms > 0 else None

    def with_deadlines(self, job: EngineJob) -> EngineJob:
        """The deadlines of `job`: the floors, or longer for a slow model (its measured pace and
        the plan's token budget, one token a step at worst); a cold one waits (`Pace.deadlines`)."""
        expected_steps = max(1, job.request.plan.max_tokens) + 2  # and its prefill
        job.first_deadline_s, job.deadline_s = self.pace.deadlines(self.first_deadline_s, self.deadline_s,
                                                                   expected_steps)
        if self.pace.s_per_step is None and self.first_deadline_s is not None:
            job.late_after_s, job.on_late = self.first_deadline_s, self.job_late
        job.on_timeout = self.job_timed_out
        return job

    def job_late(self, job: EngineJob) -> None:
        """A request of a model whose pace is unknown waited past the first-event floor: it is
        waited for (`Pace.deadlines`), and the status says the model is warming."""
        log.info("engine request %s: no first event in %g s; the model is warming", job.request.request_id,
                 self.first_deadline_s or 0)
        self.pace.late()

    def job_timed_out(self, job: EngineJob) -> None:
        """A request passed a deadline (it has been cancelled); subclasses check the engine."""
        self.counters["timeouts"] += 1
        # cancelled and finished: no longer running for its document, though its transport may
        # still hear of it (a daemon's done of the cancel); else the next request of the
        # document (which supersedes only unfinished jobs) would count as a second one running
        self._count(job, False)
        waited = job.deadline_s if job.seen_first or job.first_deadline_s is None else job.first_deadline_s
        pace = f", {self.pace.s_per_step:.2f} s/step measured" if self.pace.s_per_step is not None else ""
        log.warning("engine request %s timed out after %.3g s%s", job.request.request_id, waited, pace)
        self.pace.timed_out(f"a request got no answer in {waited:.3g} s{pace}")

    def set_state(self, state: str, error: str | None = None, new_reason: bool = False) -> None:
        """Change the state; the listener hears of each change once (`new_reason`: also of a
        changed reason in the same state)."""
        changed = state != self.state or (new_reason and (error or "") != (self.error or ""))
        self.state, self.error = state, error
        if changed and self.on_state is not None:
            self.on_state(state, error or "")

    def start_explicitly(self) -> bool:
        """The user asked for the engine (`llada.startEngine`): start it even where it was
        stopped on purpose (`llada-engine stop`). False: nothing of the kind for this engine."""
        return False

    @abstractmethod
    async def start(self, progress: Progress) -> None:
        """Load or connect; sets `state` to ready or error (never raises)."""

    @abstractmethod
    def submit(self, request: CompletionRequest) -> EngineJob:
        """Queue a request; an older unfinished job for the same doc_key is cancelled."""

    def remask(self, job: EngineJob, spans: list[tuple[int, int]]) -> EngineJob | None:
        """Syntax-guided edit hook: re-decode the characters in `spans` of the finished job's
        text. None when the engine has no remask entry point."""
        return None

    @abstractmethod
    async def close(self) -> None: ...
