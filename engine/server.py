"""The resident engine daemon: websockets in front of the scheduler (docs/protocol.md).

The event loop only parses, validates and routes messages; the scheduler's thread owns the
model. Every connection has an outgoing queue drained by one writer task, so replies and
events keep their order; the model thread hands events over with call_soon_threadsafe.
A closed connection drops its running requests before the next forward.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import itertools
import logging
import os
import signal
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from pathlib import Path
from typing import Any

from websockets.asyncio.server import Request, Response, ServerConnection, serve
from websockets.exceptions import ConnectionClosed

from engine import protocol as P
from engine import runtime
from engine.api import MAX_ALTERNATIVES, CompletionRequest, EngineEvent, Plan
from engine.policies import POLICIES, PRESETS
from engine.scheduler import Scheduler
from engine.service import TextEngine

log = logging.getLogger(__name__)
SERVER_NAME = "llada-engine/0.1.0"
MIN_PROMPT_CHARS = 16_384  # prompts are trimmed to max_prompt_tokens; far longer ones are refused
CHARS_PER_PROMPT_TOKEN = 32


@dataclass
class DaemonConfig:
    host: str = "127.0.0.1"
    port: int = 0
    token: str | None = None
    max_batch: int = 8
    max_prompt_tokens: int = 448
    max_prompt_chars: int | None = None  # default: max(MIN_PROMPT_CHARS, 32 x max_prompt_tokens)
    max_new_tokens: int = 512
    max_message_bytes: int = P.DEFAULT_MAX_MESSAGE
    deadline_s: float = 30.0
    register: bool = True  # write the per-user runtime file
    runtime_dir: Path | None = None


class Daemon:
    def __init__(self, engine: TextEngine, cfg: DaemonConfig) -> None:
        if not runtime.is_loopback(cfg.host) and not cfg.token:
            raise runtime.DaemonError(f"refusing to listen on {cfg.host} without a token: pass --token-file "
                                      "(only 127.0.0.1 may be served without one)")
        self.engine, self.cfg = engine, cfg
        self.scheduler = Scheduler(engine, cfg.max_batch, cfg.deadline_s)
        self.info = engine.info()
        self.names = {self.info["model"], str(engine.model_dir), str(engine.model_dir.resolve()), "embedded"}
        self.max_prompt_chars = cfg.max_prompt_chars or max(MIN_PROMPT_CHARS,
                                                            cfg.max_prompt_tokens * CHARS_PER_PROMPT_TOKEN)
        self.url = ""
        self.connections = 0
        self.started = time.time()
        self._header_authed: weakref.WeakSet[ServerConnection] = weakref.WeakSet()
        self._ids = itertools.count(1)
        self._stop: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def warmup(self) -> None:
        """One small completion before serving, so the first real one is not slow."""
        done: list[EngineEvent] = []
        self.scheduler.submit(CompletionRequest("warmup", "\0warmup", "def f(x):\n    return ", "",
                                                Plan(max_tokens=4)), "\0warmup", lambda ev, code: done.append(ev))
        for _ in range(200):
            if done and done[-1].kind in ("done", "error"):
                break
            self.scheduler.step()
        self.engine.prompt_cache.clear()
        for k in self.scheduler.counters:
            self.scheduler.counters[k] = 0

    # -- lifecycle ---------------------------------------------------------------------------------
    async def serve(self, on_ready: Callable[[str], None] | None = None, own_scheduler: bool = True) -> None:
        """Serve until stopped. `own_scheduler`: run the scheduler on a thread of its own;
        False when the caller runs it (`Scheduler.run`, the CLI's main thread) and this
        coroutine runs on another thread (`serve_in_main_thread`)."""
        loop = asyncio.get_running_loop()
        self._loop = loop
        self._stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(sig, self._stop.set)
        if own_scheduler:
            self.scheduler.start()
        hard = self.cfg.max_message_bytes * P.HARD_FRAME_FACTOR
        try:
            async with serve(self._handle, self.cfg.host, self.cfg.port, max_size=hard,
                             process_request=self._check_header, ping_interval=20, ping_timeout=60) as server:
                port = next(iter(server.sockets)).getsockname()[1]
                host = "127.0.0.1" if self.cfg.host in ("0.0.0.0", "::", "") else self.cfg.host
                self.url = f"ws://{host}:{port}" if ":" not in host else f"ws://[{host}]:{port}"
                if self.cfg.register:
                    runtime.write_runtime({
                        "url": self.url, "host": self.cfg.host, "port": port, "pid": os.getpid(),
                        "token": self.cfg.token, "model": self.info["model"], "model_path": self.info["path"],
                        "mode": self.info["mode"], "protocol": P.PROTOCOL_VERSION, "started": self.started},
                        self.cfg.runtime_dir)
                if on_ready is not None:
                    on_ready(self.url)
                await self._stop.wait()
        finally:
            if self.cfg.register:
                runtime.remove_runtime(os.getpid(), self.cfg.runtime_dir)
            if own_scheduler:
                await asyncio.to_thread(self.scheduler.stop)
            else:
                self.scheduler.request_stop()

    def stop(self) -> None:
        """Thread-safe."""
        if self._stop is not None and self._loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop has already closed
                self._loop.call_soon_threadsafe(self._stop.set)

    def serve_in_main_thread(self, on_ready: Callable[[str], None] | None = None) -> None:
        """Serve with the scheduler on this (the main) thread and the websockets on another;
        SIGTERM / SIGINT stop both. Re-raises what stopped the server thread, if anything."""
        failed: list[BaseException] = []

        def io() -> None:
            try:
                asyncio.run(self.serve(on_ready, own_scheduler=False))
            except BaseException as e:  # noqa: BLE001 - handed to the main thread below
                failed.append(e)
            finally:
                self.scheduler.request_stop()

        def on_signal(signum: int, frame: object) -> None:
            self.stop()
            self.scheduler.request_stop()  # also before the server is up

        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, on_signal)
        thread = threading.Thread(target=io, name="llada-io", daemon=True)
        thread.start()
        self.scheduler.run()
        thread.join(10)
        if failed:
            raise failed[0]

    def _check_header(self, conn: ServerConnection, request: Request) -> Response | None:
        """A token may come as `Authorization: Bearer <token>` at the handshake (or in hello)."""
        auth = request.headers.get("Authorization")
        if auth is None or not self.cfg.token:
            return None
        given = auth.removeprefix("Bearer ").strip()
        if not hmac.compare_digest(given.encode(), self.cfg.token.encode()):
            return conn.respond(HTTPStatus.UNAUTHORIZED, "invalid token\n")
        self._header_authed.add(conn)
        return None

    async def _handle(self, ws: ServerConnection) -> None:
        self.connections += 1
        try:
            await Connection(self, ws, next(self._ids), ws in self._header_authed).run()
        finally:
            self.connections -= 1

    # -- replies -----------------------------------------------------------------------------------
    def hello(self, ref: str | None) -> dict[str, Any]:
        c = self.cfg
        return {"type": "hello", "ref": ref, "protocol": P.PROTOCOL_VERSION, "server": SERVER_NAME, "pid": os.getpid(),
                "model": self.info,
                "capabilities": {"cancel": True, "remask": True, "supersede": "doc_per_connection",
                                 "batching": True, "deadline": True, "presets": sorted(set(PRESETS) | set(POLICIES)),
                                 "alternatives": MAX_ALTERNATIVES},
                "limits": {"max_batch": c.max_batch, "max_prompt_tokens": c.max_prompt_tokens,
                           "max_prompt_chars": self.max_prompt_chars, "max_tokens": c.max_new_tokens,
                           "max_message_bytes": c.max_message_bytes, "deadline_ms": int(c.deadline_s * 1000)}}

    def health(self, ref: str | None) -> dict[str, Any]:
        s = self.scheduler
        return {"type": "health", "ref": ref, "ok": True, "model": self.info["model"], "pid": os.getpid(),
                "running": sum(j.parent is None for j in s.running.values()), "max_batch": s.max_batch, "connections": self.connections,
                "uptime_s": time.time() - self.started}

    def stats(self, ref: str | None) -> dict[str, Any]:
        return {"type": "stats", "ref": ref,
                "stats": {**self.scheduler.snapshot(), "connections": self.connections, "model": self.info}}


class Connection:
    def __init__(self, daemon: Daemon, ws: ServerConnection, cid: int, authed: bool) -> None:
        self.d, self.ws, self.id = daemon, ws, cid
        self.authed = authed or not daemon.cfg.token
        self.loop = asyncio.get_running_loop()
        self.out: asyncio.Queue[dict[str, Any] | tuple[int, str]] = asyncio.Queue()

    def emit(self, ev: EngineEvent, code: str | None) -> None:
        """Called on the model thread."""
        with contextlib.suppress(RuntimeError):  # the loop is gone: the daemon is stopping
            self.loop.call_soon_threadsafe(self.out.put_nowait, P.event_message(ev, code))

    def reply(self, msg: dict[str, Any]) -> None:
        self.out.put_nowait(msg)

    async def _writer(self) -> None:
        while True:
            msg = await self.out.get()
            if isinstance(msg, tuple):
                await self.ws.close(msg[0], msg[1])
                return
            await self.ws.send(P.dumps(msg))

    async def run(self) -> None:
        writer = asyncio.create_task(self._writer())
        try:
            async for raw in self.ws:
                self.handle(raw)
        except ConnectionClosed:
            pass
        finally:
            self.d.scheduler.drop_owner(self.id)
            writer.cancel()
            with contextlib.suppress(asyncio.CancelledError, ConnectionClosed):
                await writer

    def handle(self, raw: str | bytes) -> None:
        d = self.d
        if len(raw) > d.cfg.max_message_bytes:
            self.reply(P.error_message(P.TOO_LARGE, f"message of {len(raw)} bytes exceeds the limit of "
                                       f"{d.cfg.max_message_bytes}"))
            return
        try:
            msg = P.parse(raw, d.cfg.max_new_tokens)
        except P.ProtocolError as e:
            self.reply(P.error_message(e.code, str(e), e.request_id))
            return
        if isinstance(msg, P.Hello):
            if d.cfg.token and not self.authed:
                if msg.token is None or not hmac.compare_digest(msg.token.encode(), d.cfg.token.encode()):
                    self.reply(P.error_message(P.UNAUTHORIZED, "invalid or missing token", msg.ref))
                    self.out.put_nowait((1008, "invalid token"))
                    return
                self.authed = True
            self.reply(d.hello(msg.ref))
            return
        if not self.authed:
            rid = getattr(msg, "request_id", None) or getattr(getattr(msg, "request", None), "request_id", None)
            self.reply(P.error_message(P.UNAUTHORIZED, "this daemon needs a token: send hello with it first", rid))
            return
        if isinstance(msg, P.Query):
            self.reply(d.health(msg.ref) if msg.type == "health" else d.stats(msg.ref))
        elif isinstance(msg, P.Cancel):
            d.scheduler.cancel(msg.request_id, self.id)
        elif isinstance(msg, P.Remask):
            d.scheduler.remask(msg.request_id, msg.spans, self.id, self.emit)
        elif isinstance(msg, P.Complete):
            req = msg.request
            if msg.model is not None and msg.model not in d.names:
                self.reply(P.error_message(P.UNKNOWN_MODEL, f"model {msg.model!r} is not loaded by this daemon; "
                                           f"it serves {d.info['model']!r} ({d.info['path']})", req.request_id))
            elif len(req.prefix) + len(req.suffix) > d.max_prompt_chars:
                self.reply(P.error_message(P.PROMPT_TOO_LONG, f"prefix + suffix of {len(req.prefix) + len(req.suffix)} "
                                           f"characters exceeds the limit of {d.max_prompt_chars} "
                                           f"({d.cfg.max_prompt_tokens} prompt tokens)", req.request_id))
            else:
                d.scheduler.submit(req, self.id, self.emit, msg.deadline_ms)
