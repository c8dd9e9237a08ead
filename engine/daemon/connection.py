"""One daemon connection: authentication, routing of its messages, and its bounded replies.

The event loop parses, validates and routes each frame (`handle`); replies and the model
thread's events are serialised once into an outgoing queue drained by one writer task, so
they keep their order. Everything a peer can make the daemon hold is bounded:
  - before authentication: `preauth_bytes` per frame (larger: close 1009), `preauth_messages`
    messages (each answered `unauthorized`; one more: close 1008), and `hello_timeout_s` to
    authenticate (close 1008);
  - replies not yet read: `max_backlog_bytes` (more: the slow reader is cut off, close 1013,
    delivered after what was already queued; the socket is dropped after LINGER_S unread);
  - a closed connection's requests are dropped before the next forward, and its queue, its
    finished requests and its prompt cache entries are released.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
from collections import Counter
from typing import TYPE_CHECKING, Any, Protocol

from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed

from engine.api import EngineEvent
from engine.daemon import protocol as P
from engine.daemon.config import DaemonConfig
from engine.decoding.rejections import Rejection

if TYPE_CHECKING:
    from engine.decoding.scheduler import Scheduler

Close = tuple[int, str]
LINGER_S = 30.0  # a closed connection's queued bytes wait this long for a slow reader


class DaemonSide(Protocol):
    """What a connection reads and calls of its daemon (`engine.daemon.server.Daemon`)."""

    @property
    def cfg(self) -> DaemonConfig: ...
    @property
    def scheduler(self) -> Scheduler: ...
    @property
    def refused(self) -> Counter[str]: ...  # connections refused or cut off, by cause
    @property
    def names(self) -> set[str]: ...  # the names a `complete` may give the loaded model
    @property
    def info(self) -> dict[str, Any]: ...
    @property
    def max_prompt_chars(self) -> int: ...

    def authenticated(self, address: str) -> None: ...
    def hello(self, ref: str | None, trusted: bool = False) -> dict[str, Any]: ...
    def health(self, ref: str | None, trusted: bool = False) -> dict[str, Any]: ...
    def stats(self, ref: str | None, trusted: bool = False) -> dict[str, Any]: ...


def token_matches(given: str | None, expected: str) -> bool:
    """Constant-time comparison; any string (lone surrogates included) is a wrong token."""
    if given is None:
        return False
    return hmac.compare_digest(given.encode("utf-8", "surrogatepass"), expected.encode("utf-8", "surrogatepass"))


class Connection:
    def __init__(self, daemon: DaemonSide, ws: ServerConnection, cid: int, header_authed: bool) -> None:
        self.d, self.cfg, self.ws, self.id = daemon, daemon.cfg, ws, cid
        self.trusted = header_authed  # proved the token: may see the daemon's pid and model path
        self.authed = header_authed or not daemon.cfg.token
        self.loop = asyncio.get_running_loop()
        self.out: asyncio.Queue[bytes | Close] = asyncio.Queue()
        self.backlog = 0  # bytes queued, not yet handed to the socket
        self.preauth_messages = 0
        self.preauth_address: str | None = None  # counted in the daemon's pre-authentication pool
        self.closing: Close | None = None
        self._writer: asyncio.Task[None] | None = None
        self._closer: asyncio.Task[None] | None = None

    # -- outgoing ----------------------------------------------------------------------------------
    def emit(self, ev: EngineEvent, why: Rejection | None) -> None:
        """Called on the model thread; a rejection goes out as its wire code."""
        with contextlib.suppress(RuntimeError):  # the loop is gone: the daemon is stopping
            self.loop.call_soon_threadsafe(self.reply, P.event_message(ev, P.wire_code(why)))

    def reply(self, msg: dict[str, Any]) -> None:
        """Queue one message (on the event loop); a reader too slow for its replies is cut off."""
        if self.closing is not None:
            return
        data = P.dumps(msg).encode("utf-8")
        if self.backlog + len(data) > self.cfg.max_backlog_bytes:
            self.abort(P.CLOSE_SLOW_READER, "slow_reader",
                       f"slow reader: more than {self.cfg.max_backlog_bytes} bytes of replies unread")
            return
        self.backlog += len(data)
        self.out.put_nowait(data)

    def close_after_replies(self, code: int, kind: str, reason: str) -> None:
        """Close once the replies queued so far are sent; counted in stats' `refused` by `kind`."""
        if self.closing is None:
            self.d.refused[kind] += 1
            self.closing = (code, reason)
            self.out.put_nowait((code, reason))

    def abort(self, code: int, kind: str, reason: str) -> None:
        """Close now, dropping the replies not yet sent; counted in stats' `refused` by `kind`."""
        if self._closer is not None:
            return
        self.d.refused[kind] += 1
        self.closing = (code, reason)
        self._release_queue()
        if self._writer is not None:
            self._writer.cancel()
        self._closer = self.loop.create_task(self._close(code, reason))

    def _release_queue(self) -> None:
        while not self.out.empty():
            self.out.get_nowait()
        self.backlog = 0

    async def _close(self, code: int, reason: str) -> None:
        """The close handshake, bounded: a peer that reads nothing cannot hold it open. When it
        does not complete in `close_timeout_s` (a slow reader has not read up to the close
        frame yet), the socket is closed gracefully: what is queued, the close frame last, is
        still delivered (the peer reads the documented code, not 1006), reading stops, and the
        socket is dropped after LINGER_S if the peer never reads it."""
        self.ws.close_timeout = None  # the bound is this wait_for's: websockets would abort at its own
        try:
            await asyncio.wait_for(self.ws.close(code, reason), self.cfg.close_timeout_s)
        except TimeoutError:
            transport = self.ws.transport
            transport.close()
            self.loop.call_later(LINGER_S, transport.abort)

    async def _write(self) -> None:
        while True:
            item = await self.out.get()
            if isinstance(item, tuple):
                self._closer = asyncio.current_task()  # type: ignore[assignment]
                await self._close(*item)
                return
            self.backlog -= len(item)
            await self.ws.send(item, text=True)

    # -- incoming ----------------------------------------------------------------------------------
    async def run(self) -> None:
        self._writer = self.loop.create_task(self._write())
        timer = None
        if not self.authed:
            self.ws.protocol.max_message_size = self.cfg.preauth_bytes
            timer = self.loop.call_later(self.cfg.hello_timeout_s, self._hello_deadline)
        try:
            async for raw in self.ws:
                if self.closing is None:
                    self.handle(raw)
        except ConnectionClosed:
            pass
        finally:
            if timer is not None:
                timer.cancel()
            self.d.scheduler.drop_owner(self.id)
            self.closing = self.closing or (1000, "")
            self._release_queue()
            self._writer.cancel()
            for task in (self._writer, self._closer):
                if task is not None and task is not asyncio.current_task():
                    with contextlib.suppress(asyncio.CancelledError, ConnectionClosed):
                        await task

    def _hello_deadline(self) -> None:
        if not self.authed:
            self.close_after_replies(P.CLOSE_POLICY, "hello_timeout",
                                     f"not authenticated within {self.cfg.hello_timeout_s:g} s")

    def _authenticate(self, msg: P.Hello) -> bool:
        token = self.cfg.token
        if token and not self.authed:
            if not token_matches(msg.token, token):
                self.reply(P.error_message(P.UNAUTHORIZED, "invalid or missing token", msg.ref))
                self.close_after_replies(P.CLOSE_POLICY, "token", "invalid token")
                return False
            self.authed = self.trusted = True
            if self.preauth_address is not None:
                self.d.authenticated(self.preauth_address)
                self.preauth_address = None
            self.ws.protocol.max_message_size = self.cfg.max_message_bytes * P.HARD_FRAME_FACTOR
        elif token and token_matches(msg.token, token):
            self.trusted = True
        return True

    def _reply_counted(self, msg: dict[str, Any]) -> None:
        """A reply to a message that did not authenticate: only `preauth_messages` of them."""
        if not self.authed:
            self.preauth_messages += 1
            if self.preauth_messages > self.cfg.preauth_messages:
                self.close_after_replies(P.CLOSE_POLICY, "preauth_messages",
                                         "too many messages before authentication")
                return
        self.reply(msg)

    def handle(self, raw: str | bytes) -> None:
        d = self.d
        if len(raw) > self.cfg.max_message_bytes:
            self._reply_counted(P.error_message(P.TOO_LARGE, f"message of {len(raw)} bytes exceeds the limit of "
                                       f"{self.cfg.max_message_bytes}"))
            return
        try:
            msg = P.parse(raw, self.cfg.max_new_tokens)
        except P.ProtocolError as e:
            self._reply_counted(P.error_message(e.code, str(e), e.request_id))
            return
        if isinstance(msg, P.Hello):
            if self._authenticate(msg):
                self.reply(d.hello(msg.ref, self.trusted))
            return
        if not self.authed:
            rid = getattr(msg, "request_id", None) or getattr(getattr(msg, "request", None), "request_id", None)
            self._reply_counted(P.error_message(P.UNAUTHORIZED, "this daemon needs a token: send hello with it "
                                                "first", rid))
            return
        self._route(msg)

    def _route(self, msg: P.Message) -> None:
        d = self.d
        if isinstance(msg, P.Query):
            self.reply(d.health(msg.ref, self.trusted) if msg.type == "health" else d.stats(msg.ref, self.trusted))
        elif isinstance(msg, P.Cancel):
            d.scheduler.cancel(msg.request_id, self.id)
        elif isinstance(msg, P.Remask):
            d.scheduler.remask(msg.request_id, msg.spans, self.id, self.emit)
        elif isinstance(msg, P.Complete):
            req = msg.request
            if msg.model is not None and msg.model not in d.names:
                where = f" ({d.info['path']})" if self.trusted else ""
                self.reply(P.error_message(P.UNKNOWN_MODEL, f"model {msg.model!r} is not loaded by this daemon; "
                                           f"it serves {d.info['model']!r}{where}", req.request_id))
            elif len(req.prefix) + len(req.suffix) > d.max_prompt_chars:
                self.reply(P.error_message(P.PROMPT_TOO_LONG, f"prefix + suffix of {len(req.prefix) + len(req.suffix)} "
                                           f"characters exceeds the limit of {d.max_prompt_chars} "
                                           f"({self.cfg.max_prompt_tokens} prompt tokens)", req.request_id))
            else:
                d.scheduler.submit(msg.request, self.id, self.emit, msg.deadline_ms)
