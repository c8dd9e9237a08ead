"""Engine access: one interface, an in-process implementation, and the choice between them.

`EngineClient.submit(request)` returns an `EngineJob` whose `events()` async-iterates the
engine's text events. A newer job for the same `doc_key` cancels the older one (between
forwards); `job.cancel()` does the same on demand. The in-process client runs the engine in
one worker thread (`TextEngine` is not thread-safe) and imports torch lazily, in that thread.
`llada_lsp.ws_engine.WsEngineClient` implements the same interface over the resident daemon;
`make_engine` picks one from the `engine` option.
"""

from __future__ import annotations

import asyncio
import logging
import queue
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
        return self.request.doc_key

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

    def set_state(self, state: str, error: str | None = None) -> None:
        """Change the state; the listener hears of each change once."""
        changed = state != self.state
        self.state, self.error = state, error
        if changed and self.on_state is not None:
            self.on_state(state, error or "")

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


class InProcessEngine(EngineClient):
    """engine.service.TextEngine in a worker thread of this process."""

    def __init__(self, model_dir: str | None = None, mode: str = "speedy",
                 device: str = "cpu", factory: Callable[..., Any] | None = None,
                 max_prompt_tokens: int | None = None, prompt_template: str | None = None) -> None:
        super().__init__()
        self.model_dir, self.mode, self.device = model_dir, mode, device
        # the model's own prompt budget and format unless the options name others
        self.prompt_kwargs: dict[str, Any] = {k: v for k, v in (("max_prompt_tokens", max_prompt_tokens),
                                                                ("prompt_template", prompt_template)) if v}
        self._factory = factory
        self._engine: Any = None
        self._jobs: queue.Queue[tuple[str, EngineJob, Any] | None] = queue.Queue()
        self._latest: dict[str, EngineJob] = {}
        self._running: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    async def start(self, progress: Progress) -> None:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()

        def report(msg: str, pct: int) -> None:
            loop.call_soon_threadsafe(progress, msg, pct)

        def resolve() -> None:
            if not done.done():
                done.set_result(None)

        def finish() -> None:
            loop.call_soon_threadsafe(resolve)

        self.state = "loading"
        self._thread = threading.Thread(target=self._worker, args=(report, finish),
                                        name="llada-engine", daemon=True)
        self._thread.start()
        await done

    def _load(self, report: Progress) -> None:
        report("importing the engine", 5)
        factory = self._factory
        if factory is None:
            from engine.service import TextEngine  # lazy: imports torch

            factory = TextEngine
        report("loading the model", 40)
        kwargs: dict[str, Any] = {"mode": self.mode, "device": self._device(), **self.prompt_kwargs}
        self._engine = factory(self.model_dir, **kwargs)
        info = getattr(self._engine, "info", None)
        self.info = dict(info()) if callable(info) else {}
        report("model ready", 100)

    def _device(self) -> str:
        if self.device != "auto":
            return self.device
        import torch  # lazy, in the worker thread

        return "cuda" if torch.cuda.is_available() else "cpu"

    def _worker(self, report: Progress, finish: Callable[[], None]) -> None:
        try:
            self._load(report)
            self.state = "ready"
        except Exception as e:  # noqa: BLE001 - any load failure becomes a reported state
            log.exception("engine failed to load")
            self.error = f"{type(e).__name__}: {e}"
            self.state = "error"
        finally:
            finish()
        if self.state != "ready":
            return
        while not self._stop.is_set():
            item = self._jobs.get()
            if item is None:
                break
            self._run(*item)

    def submit(self, request: CompletionRequest) -> EngineJob:
        return self._enqueue("complete", request, None)

    def remask(self, job: EngineJob, spans: list[tuple[int, int]]) -> EngineJob | None:
        if self._engine is None or not hasattr(self._engine, "remask"):
            return None
        return self._enqueue("remask", job.request, spans)

    def _enqueue(self, op: str, request: CompletionRequest, spans: Any) -> EngineJob:
        job = self.with_deadlines(EngineJob(request, asyncio.get_running_loop()))
        older = self._latest.get(request.doc_key)
        if older is not None and not older.finished:
            older.cancel("superseded")
        self._latest[request.doc_key] = job
        self.counters["submitted"] += 1
        if self.state != "ready":
            job.finished = True
            job.push(EngineEvent("error", request.request_id, "", error="engine not ready"))
            return job
        self._jobs.put((op, job, spans))
        return job

    def _run(self, op: str, job: EngineJob, spans: Any) -> None:
        rid = job.request.request_id
        if job.cancelled:
            self.counters["skipped"] += 1
            job.finished = True
            job.push(EngineEvent("done", rid, "", reason="superseded"
                                 if job.cancel_reason == "superseded" else "cancelled"))
            return
        key = job.doc_key
        self._running[key] = self._running.get(key, 0) + 1
        self.counters["max_running_per_doc"] = max(self.counters["max_running_per_doc"],
                                                   self._running[key])
        self.counters["engine_calls"] += 1
        job.started_at = time.perf_counter()
        job.ran = True
        try:
            if op == "remask":
                events = self._engine.remask(rid, spans, job.cancel_event)
            else:
                events = self._engine.complete(job.request, job.cancel_event)
            last_kind = None
            for ev in events:
                last_kind = ev.kind
                job.push(ev)
                if self._stop.is_set():
                    job.cancel("shutdown")
            if last_kind not in ("done", "error"):
                job.push(EngineEvent("done", rid, "", reason="error", error="no done event"))
            if job.cancelled:
                self.counters["cancelled"] += 1
        except Exception as e:  # noqa: BLE001 - reported to the request, the worker goes on
            log.exception("engine request %s failed", rid)
            job.push(EngineEvent("error", rid, "", error=f"{type(e).__name__}: {e}"))
        finally:
            self._running[key] -= 1
            job.finished = True

    def running(self) -> int:
        return sum(self._running.values())

    async def close(self) -> None:
        self._stop.set()
        for job in list(self._latest.values()):
            job.cancel("shutdown")
        self._jobs.put(None)
        if self._thread is not None and self._thread.is_alive():
            await asyncio.get_running_loop().run_in_executor(None, self._thread.join, 5.0)


def make_engine(location: str, *, model_dir: str | None, mode: str, device: str,
                token: str | None = None, max_prompt_tokens: int | None = None,
                prompt_template: str | None = None) -> EngineClient:
    """The engine client for the `engine` option.

    "inprocess": `TextEngine` in a worker thread of this process (torch loads there, lazily);
    "auto": the user's resident daemon (from the per-user runtime file), started detached
    when none runs, so that every editor on the machine shares one model;
    "ws://host:port" / "wss://...": that daemon; `token` (else $LLADA_ENGINE_TOKEN, else the
    runtime file's token when the URL is the user's own daemon) authenticates.
    """
    if location == "inprocess":
        return InProcessEngine(model_dir, mode=mode, device=device, max_prompt_tokens=max_prompt_tokens,
                               prompt_template=prompt_template)
    from llada_lsp.ws_engine import WsEngineClient  # lazy: websockets only when used

    if location == "auto":
        return WsEngineClient(None, token=token, model=model_dir, mode=mode, device=device)
    if location.startswith(("ws://", "wss://")):
        return WsEngineClient(location, token=token)
    raise ValueError(f"unknown engine location {location!r}: 'inprocess', 'auto' or a ws:// URL")
