"""The engine interface the language server uses: `EngineClient.submit(request)` returns an
`EngineJob` whose `events()` async-iterates the engine's text events. A newer job for the same
`doc_key` cancels the older one (between forwards); `job.cancel()` does the same on demand.
Implementations: `llada_lsp.engine_client.InProcessEngine` (the engine in a worker thread)
and `llada_lsp.ws_engine.WsEngineClient` (the resident daemon); `engine_client.make_engine`
picks one. Torch-free.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from engine.api import CompletionRequest, EngineEvent

log = logging.getLogger(__name__)

Progress = Callable[[str, int], None]  # (message, percentage)
StateListener = Callable[[str, str], None]  # (state, message): the engine's state changed
TIMED_OUT = "timed out"  # the start of an error event's text when a deadline passed


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
    _seen_first: bool = False
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
        if not self.cancel_event.is_set():
            self.cancel_reason = reason
            self.cancel_event.set()

    @property
    def cancelled(self) -> bool:
        return self.cancel_event.is_set()

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
        if self.first_deadline_s is not None and not self._seen_first:
            waits.append((self.submitted_at + self.first_deadline_s - now,
                          f"with a first event in {self.first_deadline_s:g} s"))
        if not waits:
            return None, ""
        left, what = min(waits)
        return max(left, 0.0), what

    async def _next(self) -> tuple[EngineEvent, float]:
        """The next event, or an error event once a deadline has passed (the job is then
        cancelled, so that the engine drops it, and `on_timeout` is told)."""
        left, what = self._wait_s()
        try:
            item = await asyncio.wait_for(self._queue.get(), left)
        except TimeoutError:
            self.cancel("timeout")
            self.finished = True
            if self.on_timeout is not None:
                self.on_timeout(self)
            return EngineEvent("error", self.request.request_id, "",
                               error=f"{TIMED_OUT}: the engine did not answer {what}"), time.perf_counter()
        self._seen_first = True
        return item

    async def events(self) -> AsyncIterator[tuple[EngineEvent, float]]:
        """(event, time it left the engine) until done or error; a passed deadline ends it
        with an error event."""
        while True:
            ev, t = await self._next()
            yield ev, t
            if ev.kind in ("done", "error"):
                return


class EngineClient(ABC):
    """What the language server needs from an engine, wherever it runs."""

    def __init__(self) -> None:
        self.state = "idle"  # idle | loading | ready | error
        self.error: str | None = None
        self.info: dict[str, Any] = {}
        self.counters: dict[str, int] = {"submitted": 0, "engine_calls": 0, "skipped": 0,
                                         "cancelled": 0, "max_running_per_doc": 0, "timeouts": 0}
        self.first_deadline_s: float | None = 10.0  # per request (options engineFirstEventMs)
        self.deadline_s: float | None = 30.0  # (options engineTimeoutMs)
        self.on_state: StateListener | None = None

    @property
    def ready(self) -> bool:
        return self.state == "ready"

    def set_deadlines(self, first_ms: int, total_ms: int) -> None:
        """Deadlines of the requests submitted from now on (0 = none)."""
        self.first_deadline_s = first_ms / 1000 if first_ms > 0 else None
        self.deadline_s = total_ms / 1000 if total_ms > 0 else None

    def with_deadlines(self, job: EngineJob) -> EngineJob:
        job.first_deadline_s, job.deadline_s = self.first_deadline_s, self.deadline_s
        job.on_timeout = self.job_timed_out
        return job

    def job_timed_out(self, job: EngineJob) -> None:
        """A request passed a deadline (it has been cancelled); subclasses check the engine."""
        self.counters["timeouts"] += 1
        log.warning("engine request %s timed out", job.request.request_id)

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

    def running(self) -> int:
        return 0
