"""The language server's websocket backend: the resident engine daemon (docs/protocol.md).

`WsConnection` is one websocket to a daemon carrying many requests (events are routed by
request id). `WsEngineClient` implements the language server's `EngineClient` interface on
top of it: `engine = "ws://host:port"` connects to that daemon, `engine = "auto"` connects to
the user's daemon named in the runtime file or starts one detached (`connect_or_start`).
Supersession by document happens in the daemon; `job.cancel()` sends a cancel message.
No torch is imported here.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import os
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, WebSocketException

from engine import protocol as P
from engine import runtime
from engine.api import CompletionRequest, EngineEvent
from llada_lsp.engine_client import EngineClient, EngineJob, EngineUnavailable, Progress

log = logging.getLogger(__name__)
_END = ("done", "error")


class WsConnection:
    """One websocket to the daemon; many concurrent requests."""

    def __init__(self, ws: ClientConnection, hello: dict[str, Any]) -> None:
        self.ws, self.hello = ws, hello
        self._routes: dict[str, asyncio.Queue[EngineEvent]] = {}
        self._replies: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._refs = itertools.count(1)
        self.closed_reason: str | None = None
        self._reader = asyncio.create_task(self._read())

    @classmethod
    async def open(cls, url: str, token: str | None = None, timeout: float = 10.0) -> WsConnection:
        try:
            ws = await connect(url, open_timeout=timeout, max_size=None)
            await ws.send(json.dumps({"type": "hello", "protocol": P.PROTOCOL_VERSION, "token": token,
                                      "client": "llada-lsp"}))
            hello = json.loads(await asyncio.wait_for(ws.recv(), timeout))
        except (OSError, TimeoutError, WebSocketException, ValueError) as e:
            raise EngineUnavailable(f"cannot reach the engine daemon at {url}: {e}") from e
        if hello.get("type") != "hello":
            await ws.close()
            raise EngineUnavailable(f"the engine daemon at {url} refused the connection: "
                                    f"{hello.get('code')}: {hello.get('error')}")
        return cls(ws, hello)

    @property
    def open_(self) -> bool:
        return self.closed_reason is None

    async def _read(self) -> None:
        try:
            async for raw in self.ws:
                msg = json.loads(raw)
                kind, rid, ref = msg.get("type"), msg.get("id"), msg.get("ref")
                if kind in ("hello", "health", "stats") and ref in self._replies:
                    fut = self._replies.pop(ref)
                    if not fut.done():
                        fut.set_result(msg)
                elif rid is not None and rid in self._routes:
                    self._routes[rid].put_nowait(P.event_from_message(msg))
                elif kind == "error":
                    log.warning("engine daemon error: %s: %s", msg.get("code"), msg.get("error"))
        except (ConnectionClosed, ValueError) as e:
            self.closed_reason = f"the engine daemon connection closed: {e}"
        finally:
            self.closed_reason = self.closed_reason or "the engine daemon connection closed"
            for rid, q in list(self._routes.items()):
                q.put_nowait(EngineEvent("error", rid, "", error=self.closed_reason))
            for fut in self._replies.values():
                if not fut.done():
                    fut.set_exception(EngineUnavailable(self.closed_reason))

    async def _send(self, msg: dict[str, Any]) -> None:
        if self.closed_reason is not None:
            raise EngineUnavailable(self.closed_reason)
        try:
            await self.ws.send(P.dumps(msg))
        except ConnectionClosed as e:
            raise EngineUnavailable(f"the engine daemon connection closed: {e}") from e

    async def query(self, kind: str = "health", timeout: float = 10.0) -> dict[str, Any]:
        ref = f"q{next(self._refs)}"
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._replies[ref] = fut
        await self._send({"type": kind, "ref": ref})
        return await asyncio.wait_for(fut, timeout)

    async def stream(self, msg: dict[str, Any]) -> AsyncIterator[EngineEvent]:
        """Send a complete or remask message; its events until done or error."""
        rid = str(msg["id"])
        q: asyncio.Queue[EngineEvent] = asyncio.Queue()
        self._routes[rid] = q
        try:
            try:
                await self._send(msg)
            except EngineUnavailable as e:
                yield EngineEvent("error", rid, "", error=str(e))
                return
            while True:
                ev = await q.get()
                yield ev
                if ev.kind in _END:
                    return
        finally:
            if self._routes.get(rid) is q:
                del self._routes[rid]

    def complete(self, req: CompletionRequest, deadline_ms: int | None = None,
                 model: str | None = None) -> AsyncIterator[EngineEvent]:
        return self.stream(P.complete_message(req, deadline_ms, model))

    def remask(self, request_id: str, spans: list[tuple[int, int]]) -> AsyncIterator[EngineEvent]:
        return self.stream({"type": "remask", "id": request_id, "spans": [list(s) for s in spans]})

    async def cancel(self, request_id: str) -> None:
        with contextlib.suppress(EngineUnavailable):
            await self._send({"type": "cancel", "id": request_id})

    async def close(self) -> None:
        await self.ws.close()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reader


async def connect_or_start(model: str | None = None, mode: str | None = None, device: str | None = None,
                           timeout: float = 180.0) -> WsConnection:
    """The user's daemon (from the runtime file), started detached first when none runs."""
    info = await asyncio.to_thread(runtime.ensure_daemon, model, mode, device, (), timeout)
    return await WsConnection.open(str(info["url"]), info.get("token"))


@dataclass
class WsJob(EngineJob):
    on_cancel: Callable[[str], None] | None = None

    def cancel(self, reason: str = "cancelled") -> None:
        first = not self.cancel_event.is_set()
        super().cancel(reason)
        if first and not self.finished and self.on_cancel is not None:
            with contextlib.suppress(RuntimeError):  # from any thread; a closed loop: nothing to cancel
                self.loop.call_soon_threadsafe(self.on_cancel, self.request.request_id)


class WsEngineClient(EngineClient):
    """EngineClient over the daemon. `url=None` means "auto": find or start the user's daemon."""

    def __init__(self, url: str | None = None, *, token: str | None = None, model: str | None = None,
                 mode: str | None = None, device: str | None = None, start_timeout: float = 180.0) -> None:
        super().__init__()
        self.url, self.model, self.mode, self.device = url, model, mode, device
        self.token = token if token is not None else os.environ.get("LLADA_ENGINE_TOKEN")
        self.start_timeout = start_timeout
        self.conn: WsConnection | None = None
        self._latest: dict[str, WsJob] = {}
        self._jobs: dict[int, WsJob] = {}  # by id(): jobs are unhashable dataclasses
        self._tasks: set[asyncio.Task[None]] = set()
        self._connecting: asyncio.Lock | None = None

    async def _connect(self) -> WsConnection:
        if self._connecting is None:
            self._connecting = asyncio.Lock()
        async with self._connecting:
            if self.conn is not None and self.conn.open_:
                return self.conn
            if self.url is None:
                self.conn = await connect_or_start(self.model, self.mode, self.device, self.start_timeout)
            else:
                token = self.token
                if token is None:  # the user's own daemon: its token is in the runtime file
                    info = runtime.read_runtime()
                    token = info.get("token") if info is not None and info.get("url") == self.url else None
                self.conn = await WsConnection.open(self.url, token)
            self.info = dict(self.conn.hello.get("model") or {})
            self.info["daemon_pid"] = self.conn.hello.get("pid")
            self.state, self.error = "ready", None
            return self.conn

    async def start(self, progress: Progress) -> None:
        self.state = "loading"
        progress("starting the engine daemon" if self.url is None else f"connecting to {self.url}", 10)
        try:
            await self._connect()
        except (EngineUnavailable, runtime.DaemonError, OSError) as e:
            self.state, self.error = "error", str(e)
            return
        progress("engine daemon ready", 100)

    def submit(self, request: CompletionRequest) -> EngineJob:
        return self._spawn(request, None)

    def remask(self, job: EngineJob, spans: list[tuple[int, int]]) -> EngineJob | None:
        return self._spawn(job.request, spans)

    def _spawn(self, request: CompletionRequest, spans: list[tuple[int, int]] | None) -> WsJob:
        loop = asyncio.get_running_loop()
        job = WsJob(request, loop, on_cancel=self._send_cancel)
        older = self._latest.get(request.doc_key)
        if older is not None and not older.finished:
            older.cancel_reason = "superseded"  # the daemon supersedes it by document key
            older.cancel_event.set()
        self._latest[request.doc_key] = job
        self.counters["submitted"] += 1
        self._jobs[id(job)] = job
        task = loop.create_task(self._run(job, spans))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return job

    def _send_cancel(self, request_id: str) -> None:
        """On the event loop: tell the daemon (it stops the request before its next forward)."""
        if self.conn is not None:
            task = asyncio.get_running_loop().create_task(self.conn.cancel(request_id))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _run(self, job: WsJob, spans: list[tuple[int, int]] | None) -> None:
        rid = job.request.request_id
        try:
            try:
                conn = await self._connect()
            except (EngineUnavailable, runtime.DaemonError, OSError) as e:
                # stay "ready": the next request tries again (auto: restarting the daemon)
                self.error = str(e)
                self.counters["connect_errors"] = self.counters.get("connect_errors", 0) + 1
                job.push(EngineEvent("error", rid, "", error=str(e)))
                return
            if job.cancelled:
                self.counters["skipped"] += 1
                job.push(EngineEvent("done", rid, "", reason="superseded" if job.cancel_reason == "superseded"
                                     else "cancelled"))
                return
            self.counters["engine_calls"] += 1
            job.ran = True
            stream = conn.remask(rid, spans) if spans is not None else conn.complete(job.request)
            async for ev in stream:
                if job.started_at is None:
                    job.started_at = job.submitted_at
                job.push(ev)
                if ev.kind == "done" and ev.reason in ("cancelled", "superseded"):
                    self.counters["cancelled"] += 1
        finally:
            job.finished = True
            self._jobs.pop(id(job), None)

    def running(self) -> int:
        return len(self._jobs)

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
        for job in list(self._jobs.values()):
            job.cancel("shutdown")
        if self.conn is not None:
            await self.conn.close()
        for task in list(self._tasks):
            task.cancel()
