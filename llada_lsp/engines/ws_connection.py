"""One websocket to the engine daemon carrying many requests, events routed by request id
(docs/protocol.md), and `connect_or_start`: the user's daemon, started detached when none runs.
No torch is imported here."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus, WebSocketException

from engine.api import CompletionRequest, EngineEvent
from engine.daemon import protocol as P
from engine.daemon import runtime
from llada_lsp.engines import reconnect
from llada_lsp.engines.engine_base import EngineUnavailable

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
        self.unresponsive = False  # closed because the daemon stopped answering pings
        self.on_lost: Callable[[WsConnection], None] | None = None  # once, when it closes
        self._reader = asyncio.create_task(self._read())

    @classmethod
    async def open(cls, url: str, token: str | None = None, timeout: float = 10.0) -> WsConnection:
        try:
            # the token in the handshake too: an authenticated connection never waits in the
            # daemon's small pool of connections that have not authenticated yet
            headers = {"Authorization": f"Bearer {token}"} if token else None
            ws = await connect(url, open_timeout=timeout, max_size=None, ping_interval=reconnect.KEEPALIVE_S,
                               additional_headers=headers,
                               ping_timeout=reconnect.KEEPALIVE_TIMEOUT_S,
                               close_timeout=reconnect.CLOSE_TIMEOUT_S)
            await ws.send(json.dumps({"type": "hello", "protocol": P.PROTOCOL_VERSION, "token": token,
                                      "client": "llada-lsp"}))
            hello = json.loads(await asyncio.wait_for(ws.recv(), timeout))
        except InvalidStatus as e:  # 401: the token in the header is wrong; 503: no slot free
            raise EngineUnavailable(f"the engine daemon at {url} refused the connection: HTTP "
                                    f"{e.response.status_code}: {e.response.body.decode('utf-8', 'replace').strip()}"
                                    ) from e
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
            self.unresponsive = self.unresponsive or "keepalive ping timeout" in str(e)
        finally:
            if self.unresponsive:
                self.closed_reason = "the engine daemon stopped answering"
            self.closed_reason = self.closed_reason or "the engine daemon connection closed"
            for rid, q in list(self._routes.items()):
                q.put_nowait(EngineEvent("error", rid, "", error=self.closed_reason))
            for fut in self._replies.values():
                if not fut.done():
                    fut.set_exception(EngineUnavailable(self.closed_reason))
            if self.on_lost is not None:
                self.on_lost(self)

    def abandon(self) -> None:
        """Drop the connection to a daemon that does not answer (no closing handshake)."""
        self.unresponsive = True
        transport = self.ws.transport
        if transport is not None:
            transport.abort()

    async def _send(self, msg: dict[str, Any]) -> None:
        if self.closed_reason is not None:
            raise EngineUnavailable(self.closed_reason)
        try:
            await self.ws.send(P.dumps(msg))
        except ConnectionClosed as e:
            raise EngineUnavailable(f"the engine daemon connection closed: {e}") from e
        except UnicodeEncodeError as e:  # the message only fails; the connection stays open
            raise EngineUnavailable(f"cannot encode the message for the engine daemon: {e}") from e

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


async def connect_or_start(model: str | None = None, device: str | None = None,
                           timeout: float = 180.0, explicit: bool = False, threads: int = 0) -> WsConnection:
    """The user's daemon (from the runtime file), started detached first when none runs (not
    after `llada-engine stop` unless `explicit`: runtime.DaemonHeld), with the engine's default
    preset: each request names its own. `threads` (the `threads` option; 0: measured) fixes the
    torch threads of a daemon started here; a daemon already running keeps its own."""
    extra = ("--threads", str(threads)) if threads else ()
    info = await asyncio.to_thread(runtime.ensure_daemon, model, None, device, extra, timeout, None, explicit)
    return await WsConnection.open(str(info["url"]), info.get("token"))
