"""The language server's websocket backend: the resident engine daemon (docs/protocol.md).

`WsConnection` (llada_lsp/engines/ws_connection.py) is one websocket to a daemon carrying many requests (events are routed by
request id). `WsEngineClient` implements the language server's `EngineClient` interface on
top of it: `engine = "ws://host:port"` connects to that daemon, `engine = "auto"` connects to
the user's daemon named in the runtime file or starts one detached (`connect_or_start`).
A superseded job (`EngineClient.supersede`, the one rule) is cancelled like any other:
`job.cancel()` sends a cancel message.
No torch is imported here.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncIterator

from engine.api import CompletionRequest, EngineEvent
from engine.daemon import runtime
from llada_lsp.engines import reconnect
from llada_lsp.engines.engine_base import EngineClient, EngineJob, EngineUnavailable, Progress
from llada_lsp.engines.ws_connection import WsConnection, connect_or_start

__all__ = ["WsConnection", "WsEngineClient", "connect_or_start"]

log = logging.getLogger(__name__)


class WsEngineClient(EngineClient):
    """EngineClient over the daemon. `url=None` means "auto": find or start the user's daemon."""

    def __init__(self, url: str | None = None, *, token: str | None = None, model: str | None = None,
                 device: str | None = None, start_timeout: float = 180.0, threads: int = 0) -> None:
        super().__init__()
        # no preset: each request names its own; a daemon started here keeps the engine's default
        self.url, self.model, self.device = url, model, device
        self.threads = threads  # a daemon started here: its torch threads (0: measured)
        self.token = token if token is not None else os.environ.get("LLADA_ENGINE_TOKEN")
        self.start_timeout = start_timeout
        # the editor restarted the server on the user's request: start the daemon even after
        # `llada-engine stop` (once)
        self.explicit = os.environ.get("LLADA_ENGINE_RESTART") == "1"
        self.connect_timeout = 5.0  # a daemon that accepts but never answers the hello: retry later
        self.conn: WsConnection | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._connecting: asyncio.Lock | None = None
        self._retry: asyncio.Task[None] | None = None  # the reconnection loop, while one runs
        self._closing = False

    async def _connect(self) -> WsConnection:
        if self._connecting is None:
            self._connecting = asyncio.Lock()
        async with self._connecting:
            if self.conn is not None and self.conn.open_:
                return self.conn
            if self.url is None:
                self.conn = await connect_or_start(self.model, self.device, self.start_timeout,
                                                   self.explicit, self.threads)
                self.explicit = False
            else:
                token = self.token
                if token is None:  # the user's own daemon: its token is in the runtime file
                    info = runtime.read_runtime()
                    token = info.get("token") if info is not None and info.get("url") == self.url else None
                self.conn = await WsConnection.open(self.url, token, self.connect_timeout)
            self.conn.on_lost = self._lost
            self.info = {**(self.conn.hello.get("model") or {}), "daemon_pid": self.conn.hello.get("pid")}
            self.set_state("ready")
            return self.conn

    async def start(self, progress: Progress) -> None:
        self.state = "loading"
        progress("starting the engine daemon" if self.url is None else f"connecting to {self.url}", 10)
        try:
            await self._connect()
        except (EngineUnavailable, runtime.DaemonError, OSError) as e:
            self.state, self.error = "error", str(e)
            self._start_retry()
            return
        progress("engine daemon ready", 100)

    # -- faults: a lost, frozen or refusing daemon --------------------------------------------
    def _lost(self, conn: WsConnection) -> None:
        """The connection closed (on the event loop): report once, reconnect with backoff."""
        if conn is not self.conn or self._closing:
            return
        self.conn = None
        self.counters["lost"] = self.counters.get("lost", 0) + 1
        pid = conn.hello.get("pid")
        if conn.unresponsive and self.url is None and reconnect.stopped(pid):
            reconnect.retire_daemon(pid)  # auto: a fresh daemon replaces the stopped one
        self.set_state("error", f"{conn.closed_reason}; reconnecting")
        self._start_retry()

    def start_explicitly(self) -> bool:
        """auto: (re)connect now, starting the daemon even after `llada-engine stop`."""
        if self.url is not None or self._closing:
            return False
        self.explicit = True
        if self.conn is None or not self.conn.open_:
            if self._retry is not None:
                self._retry.cancel()  # it may be waiting out a long backoff delay
                self._retry = None
            self._start_retry()
        return True

    def _start_retry(self) -> None:
        if self._retry is None and not self._closing:
            self._retry = asyncio.get_running_loop().create_task(self._reconnect())

    async def _reconnect(self) -> None:
        """Try again after each backoff delay until connected (the state then returns to ready)."""
        try:
            for delay in reconnect.backoff(cap=10.0 if self.url is not None else 30.0):
                if delay:
                    await asyncio.sleep(delay)  # the retry schedule, not a synchronisation
                try:
                    await self._connect()
                    self.counters["reconnected"] = self.counters.get("reconnected", 0) + 1
                    return
                except (EngineUnavailable, runtime.DaemonError, OSError) as e:
                    self.counters["connect_errors"] = self.counters.get("connect_errors", 0) + 1
                    # stopped on purpose (llada-engine stop): the editors are told the new reason
                    self.set_state("error", f"{e}; retrying", new_reason=isinstance(e, runtime.DaemonHeld))
        finally:
            if self._retry is asyncio.current_task():
                self._retry = None

    def job_timed_out(self, job: EngineJob) -> None:
        """A request passed its deadline: a daemon that does not answer a health call at once
        is given up on (as when it stops answering pings)."""
        super().job_timed_out(job)
        conn = self.conn
        if conn is not None and conn.open_:
            task = asyncio.get_running_loop().create_task(self._check_health(conn))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _check_health(self, conn: WsConnection) -> None:
        try:
            await conn.query("health", timeout=reconnect.HEALTH_TIMEOUT_S)
        except (EngineUnavailable, TimeoutError) as e:
            log.warning("the engine daemon did not answer a health call: %s", e or "timeout")
            conn.abandon()

    def submit(self, request: CompletionRequest) -> EngineJob:
        return self._spawn(request, None)

    def remask(self, job: EngineJob, spans: list[tuple[int, int]]) -> EngineJob | None:
        return self._spawn(job.request, spans)

    def _spawn(self, request: CompletionRequest, spans: list[tuple[int, int]] | None) -> EngineJob:
        job = self.new_job(request, EngineJob)
        task = asyncio.get_running_loop().create_task(self._run(job, spans))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return job

    def send_cancel(self, job: EngineJob) -> None:
        """On the event loop: tell the daemon (it stops the request before its next forward)."""
        if self.conn is not None:
            task = asyncio.get_running_loop().create_task(self.conn.cancel(job.request.request_id))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _run(self, job: EngineJob, spans: list[tuple[int, int]] | None) -> None:
        try:
            if self._retry is not None:  # reconnecting: fail at once, the loop reports
                self.fail(job, self.error or "engine unavailable")
                return
            try:
                conn = await self._connect()
            except (EngineUnavailable, runtime.DaemonError, OSError) as e:
                self.counters["connect_errors"] = self.counters.get("connect_errors", 0) + 1
                self.set_state("error", f"{e}; retrying")
                self._start_retry()
                self.fail(job, str(e))
                return
            if job.cancelled:
                self.skip(job)
                return
            self.start_job(job)
            await self._stream(job, conn, spans)
        finally:
            self.release(job)

    async def _stream(self, job: EngineJob, conn: WsConnection, spans: list[tuple[int, int]] | None) -> None:
        """Pass the daemon's events on (a cancelled job's end: the daemon's answer to the cancel)."""
        async for ev in self._events_of(job, conn, spans):
            self.deliver(job, ev)

    @staticmethod
    def _events_of(job: EngineJob, conn: WsConnection, spans: list[tuple[int, int]] | None
                   ) -> AsyncIterator[EngineEvent]:
        if spans is not None:
            return conn.remask(job.request.request_id, spans)
        return conn.complete(job.request)

    async def complete(self, req: CompletionRequest, cancel: asyncio.Event | None = None
                       ) -> AsyncIterator[EngineEvent]:
        """Convenience stream of one request's events; `cancel` set -> a cancel message."""
        job = self.submit(req)
        waiter = None
        if cancel is not None:
            async def watch() -> None:
                await cancel.wait()
                job.cancel()
            waiter = asyncio.get_running_loop().create_task(watch())
        try:
            async for ev, _ in job.events():
                yield ev
        finally:
            if waiter is not None:
                waiter.cancel()

    async def close(self) -> None:
        self._closing = True
        if self._retry is not None:
            self._retry.cancel()
        self.cancel_all("shutdown")
        if self.conn is not None:
            await self.conn.close()
        for task in list(self._tasks):
            task.cancel()
