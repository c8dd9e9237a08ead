"""The resident engine daemon: websockets in front of the scheduler (docs/protocol.md).

The event loop only parses, validates and routes messages (`engine.daemon.connection`); the
scheduler's thread owns the model. Every connection has a bounded outgoing queue drained by
one writer task, so replies and events keep their order; the model thread hands events over
with call_soon_threadsafe. A closed connection drops its running requests before the next
forward. The handshake refuses browsers (any `Origin` header: 403), a wrong
`Authorization` token (401) and connections above their quota (503): connections that proved
the token (or any, on a daemon without one) up to `max_connections`; connections that have not
(yet: they may still send `hello`) have a small pool of their own, `preauth_connections` in
all and `preauth_per_address` from one address, so that they can never take the slots of a
client that sends its token in the handshake.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import signal
import threading
import time
import weakref
from collections import Counter
from collections.abc import Callable
from http import HTTPStatus
from typing import Any

from websockets.asyncio.server import Request, Response, ServerConnection, serve

from engine.api import MAX_ALTERNATIVES, CompletionRequest, EngineEvent, Plan
from engine.daemon import lifetime, runtime
from engine.daemon import protocol as P
from engine.daemon.config import DaemonConfig
from engine.daemon.connection import Connection, token_matches
from engine.decoding.policies import POLICIES, PRESETS
from engine.decoding.scheduler import Scheduler
from engine.service import TextEngine

log = logging.getLogger(__name__)
SERVER_NAME = "llada-engine/0.1.0"
MIN_PROMPT_CHARS = 16_384  # prompts are trimmed to max_prompt_tokens; far longer ones are refused
CHARS_PER_PROMPT_TOKEN = 32


class Daemon:
    def __init__(self, engine: TextEngine, cfg: DaemonConfig) -> None:
        if not runtime.is_loopback(cfg.host) and not cfg.token:
            raise runtime.DaemonError(f"refusing to listen on {cfg.host} without a token: pass --token-file "
                                      "(only 127.0.0.1 may be served without one)")
        self.engine, self.cfg = engine, cfg
        self.scheduler = Scheduler(engine, cfg.max_batch, cfg.deadline_s, threads=engine.threads)
        self.info = engine.info()
        self.names = {self.info["model"], str(engine.model_dir), str(engine.model_dir.resolve()), "embedded"}
        self.max_prompt_chars = cfg.max_prompt_chars or max(MIN_PROMPT_CHARS,
                                                            cfg.max_prompt_tokens * CHARS_PER_PROMPT_TOKEN)
        self.url = ""
        self.connections = 0
        self.preauth: Counter[str] = Counter()  # live connections not yet authenticated, by address
        self.started = time.time()
        self._header_authed: weakref.WeakSet[ServerConnection] = weakref.WeakSet()
        self.live: weakref.WeakSet[Connection] = weakref.WeakSet()  # connections not yet freed
        self.refused: Counter[str] = Counter()  # connections refused or cut off, by cause
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
            async with serve(self._handle, self.cfg.host, self.cfg.port, max_size=hard, max_queue=4,
                             close_timeout=self.cfg.close_timeout_s, process_request=self._check_request,
                             ping_interval=20, ping_timeout=60) as server:
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
                idle = loop.create_task(lifetime.exit_when_idle(
                    self.cfg.idle_exit_s, lambda: self.connections > 0 or bool(self.scheduler.running),
                    self._idle_exit)) if self.cfg.idle_exit_s > 0 else None
                await self._stop.wait()
                if idle is not None:
                    idle.cancel()
        finally:
            if self.cfg.register:
                runtime.remove_runtime(os.getpid(), self.cfg.runtime_dir)
            if own_scheduler:
                await asyncio.to_thread(self.scheduler.stop)
            else:
                self.scheduler.request_stop()

    def _idle_exit(self) -> None:
        log.info("no client for %.0f s: exiting (--idle-exit)", self.cfg.idle_exit_s)
        self.stop()

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

    def _check_request(self, conn: ServerConnection, request: Request) -> Response | None:
        """The handshake: no browser origin, a free connection slot, and a token given as
        `Authorization: Bearer <token>` must be right (it may come in hello instead)."""
        if request.headers.get("Origin") is not None:  # browsers always send one; editors none
            self.refused["origin"] += 1
            return conn.respond(HTTPStatus.FORBIDDEN, "browser origins are refused: connect without an "
                                "Origin header\n")
        auth = request.headers.get("Authorization")
        authed = not self.cfg.token
        if auth is not None and self.cfg.token:
            if not token_matches(auth.removeprefix("Bearer ").strip(), self.cfg.token):
                self.refused["token"] += 1
                return conn.respond(HTTPStatus.UNAUTHORIZED, "invalid token\n")
            authed = True
        full = self.quota_full(authed, _address(conn))
        if full:
            self.refused["connections" if authed else "preauth_connections"] += 1
            return conn.respond(HTTPStatus.SERVICE_UNAVAILABLE, f"too many connections ({full})\n")
        if authed and self.cfg.token:
            self._header_authed.add(conn)
        return None

    def quota_full(self, authed: bool, address: str) -> str | None:
        """Why one more connection of this kind cannot be served now (None: it can)."""
        pre = sum(self.preauth.values())
        if authed:
            n = self.connections - pre
            return f"limit {self.cfg.max_connections}" if n >= self.cfg.max_connections else None
        if pre >= self.cfg.preauth_connections:
            return f"limit {self.cfg.preauth_connections} before authentication"
        if self.preauth[address] >= self.cfg.preauth_per_address:
            return f"limit {self.cfg.preauth_per_address} from one address before authentication"
        return None

    def authenticated(self, address: str) -> None:
        """A connection proved the token in `hello`: it leaves the pre-authentication pool."""
        self.preauth[address] -= 1
        if self.preauth[address] <= 0:
            del self.preauth[address]

    async def _handle(self, ws: ServerConnection) -> None:
        conn = Connection(self, ws, next(self._ids), ws in self._header_authed)
        address = _address(ws)
        full = self.quota_full(conn.authed, address)  # handshakes that passed the check together
        if full:
            self.refused["connections" if conn.authed else "preauth_connections"] += 1
            await ws.close(P.CLOSE_TRY_AGAIN, f"too many connections ({full})")
            return
        self.connections += 1
        if not conn.authed:
            conn.preauth_address = address
            self.preauth[address] += 1
        self.live.add(conn)
        try:
            await conn.run()
        finally:
            self.connections -= 1
            if conn.preauth_address is not None:
                self.authenticated(conn.preauth_address)

    # -- replies -----------------------------------------------------------------------------------
    def model_info(self, trusted: bool) -> dict[str, Any]:
        """The model's description; its local path only for a peer that proved the token."""
        return dict(self.info) if trusted else {k: v for k, v in self.info.items() if k != "path"}

    def hello(self, ref: str | None, trusted: bool = False) -> dict[str, Any]:
        c = self.cfg
        return {"type": "hello", "ref": ref, "protocol": P.PROTOCOL_VERSION, "server": SERVER_NAME,
                **({"pid": os.getpid()} if trusted else {}), "model": self.model_info(trusted),
                "capabilities": {"cancel": True, "remask": True,
                                 "batching": True, "deadline": True, "presets": sorted(set(PRESETS) | set(POLICIES)),
                                 "alternatives": MAX_ALTERNATIVES},
                "limits": {"max_batch": c.max_batch, "max_prompt_tokens": c.max_prompt_tokens,
                           "max_prompt_chars": self.max_prompt_chars, "max_tokens": c.max_new_tokens,
                           "max_message_bytes": c.max_message_bytes, "deadline_ms": int(c.deadline_s * 1000)}}

    def health(self, ref: str | None, trusted: bool = False) -> dict[str, Any]:
        s = self.scheduler
        return {"type": "health", "ref": ref, "ok": True, "model": self.info["model"],
                **({"pid": os.getpid()} if trusted else {}),
                "running": sum(j.parent is None for j in s.running.values()), "max_batch": s.max_batch,
                "connections": self.connections, "uptime_s": time.time() - self.started}

    def stats(self, ref: str | None, trusted: bool = False) -> dict[str, Any]:
        return {"type": "stats", "ref": ref, "stats": {**self.scheduler.snapshot(), "connections": self.connections,
                                                       "refused": dict(self.refused),
                                                       "model": self.model_info(trusted)}}


def _address(ws: ServerConnection) -> str:
    """The peer's IP address ("" when unknown)."""
    try:
        return str(ws.remote_address[0])
    except (TypeError, IndexError, AttributeError, OSError):
        return ""
