"""Serve LSP over stdio without a thread hop per read.

pygls reads stdin through `run_in_executor` (one worker-thread round trip per header line and
per body). With the engine thread holding the GIL most of the time, each round trip can wait
a whole GIL switch interval, several per message. Here stdin, when it is a pipe or a socket,
is read by the event loop itself (`connect_read_pipe`); anything else (a file, a TTY) falls
back to pygls' reader.

The message loop is the server's own (`serve_messages`), not pygls': bad input gets the
JSON-RPC error a client can act on wherever one can be sent, and never stops the loop. A
body that is not JSON (not UTF-8, cut short, nested too deeply for the parser) is a Parse
error (-32700; id null, or the request's id when it heads the body); one that is not a
request object (a batch, a non-string method, a boolean id) an Invalid Request (-32600); a
request whose params do not match the method's types gets Invalid Params (-32602) naming the
fields, with its id (pygls logs these and never answers, so the client waits forever); a
custom method's params may be left out (they are then `{}`); a notification with bad params
is logged and dropped; a notification's method sent with an id (a request, for JSON-RPC) is
not handled and gets Method not found (-32601: the method is not available as a request); a Content-Length over `MAX_FRAME` is refused. A wrong Content-Length
or a damaged header is resynchronised at the next header (llada_lsp/lsp/framing.py): bytes
outside any frame are logged and answered with one Parse error, and a body whose JSON value
is followed by the start of a header is handled and the rest read again.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import stat
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, BinaryIO

import attrs
from cattrs import transform_error
from cattrs.errors import ClassValidationError
from cattrs.v import format_exception
from lsprotocol import types as t
from pygls.exceptions import (
    JsonRpcException,
    JsonRpcInternalError,
    JsonRpcInvalidParams,
    JsonRpcInvalidRequest,
    JsonRpcMethodNotFound,
    JsonRpcParseError,
    JsonRpcServerNotInitialized,
)
from pygls.io_ import StdinAsyncReader, StdoutWriter

from llada_lsp.lsp.framing import Frames, Junk, Oversize, header_head, sample

log = logging.getLogger(__name__)

MAX_FRAME = 2**28  # bytes of one message body (a 1 MB document is ~2 MB of JSON)


class PipeReader:
    """pygls' AsyncReader interface over an asyncio StreamReader (b"" at the end)."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self.reader = reader

    async def readline(self) -> bytes:
        return await self.reader.readline()

    async def read(self, n: int) -> bytes:
        """Up to `n` bytes of a body, as soon as some are there (the framing cuts a body short
        when the next header arrives instead of its bytes)."""
        await asyncio.sleep(0)
        return await self.reader.read(n)

    async def readexactly(self, n: int) -> bytes:
        """A message body. Yields to the loop first, so that the previous message's handler
        task starts before this message is handled, as with pygls' threaded reader."""
        await asyncio.sleep(0)
        try:
            return await self.reader.readexactly(n)
        except asyncio.IncompleteReadError:
            return b""


async def pipe_reader(stdin: BinaryIO) -> PipeReader | None:
    """A loop-driven reader of `stdin`, or None when it is not a pipe or socket."""
    try:
        mode = os.fstat(stdin.fileno()).st_mode
    except (OSError, ValueError, AttributeError):
        return None
    if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)):
        return None
    reader = asyncio.StreamReader(limit=2**26)
    loop = asyncio.get_running_loop()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), stdin)
    return PipeReader(reader)


def serve_stdio(server: Any, stdin: BinaryIO | None = None, stdout: BinaryIO | None = None
                ) -> None:
    """pygls' `start_io`, reading stdin on the event loop when possible."""
    stdin = stdin or sys.stdin.buffer
    server._stop_event = threading.Event()  # pygls' shutdown() sets it
    server.protocol.set_writer(StdoutWriter(stdout or sys.stdout.buffer))

    async def main() -> None:
        reader: Any = await pipe_reader(stdin)
        if reader is None:
            log.info("stdin is not a pipe: reading it in a worker thread")
            reader = StdinAsyncReader(stdin, server.thread_pool)
        await serve_messages(reader, server.protocol, server._stop_event,
                             on_error=server.report_server_error)

    status: Any = 0
    try:
        asyncio.run(main())
    except BrokenPipeError:
        log.error("connection to the client is lost: shutting down")
    except KeyboardInterrupt:
        pass
    except SystemExit as e:  # `exit`: 0 after `shutdown`, else 1 (LSP)
        status = e.code
    finally:
        server.shutdown()
    if status:
        raise SystemExit(status)


async def serve_messages(reader: Any, protocol: Any, stop: threading.Event,
                         max_frame: int = MAX_FRAME,
                         on_error: Callable[[Exception, type[JsonRpcException]], Any] | None = None
                         ) -> None:
    """Read `Content-Length`-framed messages from `reader` until EOF or `stop`, and hand
    each to `protocol` (see the module docstring for what bad input gets)."""
    frames = Frames(reader, max_frame)
    while not stop.is_set():
        frame = await frames.next()
        if frame is None:
            return
        if isinstance(frame, Oversize):
            log.error("a message of %d bytes is over the %d byte limit: skipped",
                      frame.length, max_frame)
            reply_error(protocol, None, JsonRpcInvalidRequest(
                f"message of {frame.length} bytes is over the server's limit of {max_frame} bytes"))
        elif isinstance(frame, Junk):
            junk(protocol, frame)
        else:
            extra = dispatch(protocol, frame.data, on_error)
            if extra:
                frames.unread(extra)


def junk(protocol: Any, frame: Junk) -> None:
    """Bytes outside any frame (a wrong Content-Length, a damaged header): logged, and
    answered once (with the id of the request they hold, when they hold a whole one)."""
    log.error("skipped %d bytes outside any message (a wrong Content-Length?): %s",
              frame.size, sample(frame.data))
    data = _decode(frame.data[frame.data.find(b"{"):]) if b"{" in frame.data else None
    msg_id = _request_id(data[0]) if data is not None else None
    reply_error(protocol, msg_id, JsonRpcParseError(
        f"Parse error: skipped {frame.size} bytes outside any message (a wrong Content-Length "
        "or a damaged header before them)"))


def dispatch(protocol: Any, body: bytes, on_error: Callable[..., Any] | None = None) -> bytes:
    """Parse, type and hand over one message body; errors as the module docstring says.
    Returns the bytes after the body's JSON value when they look like the start of the next
    message (the Content-Length was too large): the caller reads them again."""
    decoded = _decode(body)
    if isinstance(decoded, str):
        reply_error(protocol, _truncated_id(body), JsonRpcParseError(f"Parse error: {decoded}"))
        return b""
    data, extra = decoded
    if extra:
        if not header_head(extra):
            reply_error(protocol, _request_id(data), JsonRpcParseError(
                f"Parse error: {len(extra)} bytes after the JSON value: {sample(extra)}"))
            return b""
        log.error("the Content-Length of a message was %d bytes too large (it swallowed %s): "
                  "resynchronised", len(extra), sample(extra))
    handle(protocol, data, on_error)
    return extra


def handle(protocol: Any, data: Any, on_error: Callable[..., Any] | None = None) -> None:
    """Type and hand over one decoded message."""
    if not isinstance(data, dict) or not isinstance(data.get("method", ""), str) or \
            ("id" in data and "method" in data and _request_id(data) is None):
        reply_error(protocol, _request_id(data), JsonRpcInvalidRequest(
            "Invalid Request: a message is one JSON object with a string method and an "
            "integer or string id (no batches)"))
        return
    method, msg_id = data.get("method"), data.get("id")
    is_request = method is not None and isinstance(msg_id, (int, str))
    if method is not None and data.get("params") is None and \
            protocol.get_message_type(method) is None:
        data["params"] = {}  # a custom method's params may be left out (JSON-RPC)
    if is_request and is_notification_method(protocol, str(method)):
        reply_error(protocol, msg_id, JsonRpcMethodNotFound(
            f"Method not found: {method} is a notification, sent without an id; this request "
            "was not handled"))
        return
    if method == "$/cancelRequest" and _request_id(data.get("params")) is None:  # a notification here
        log.error("dropped: invalid params for $/cancelRequest: params.id must be an integer or a string")
        return
    try:
        message = protocol.structure_message(data)
    except JsonRpcException as e:
        why = e.message
        if isinstance(e.__cause__, ClassValidationError):
            why = "; ".join(transform_error(e.__cause__, format_exception=_why)[:4])
        if is_request:
            reply_error(protocol, msg_id, JsonRpcInvalidParams(f"Invalid params for {method}: {why}"))
        else:
            log.error("dropped %s: %s", method or "a response", why)
        return
    try:
        protocol.handle_message(message)
    except Exception as e:  # noqa: BLE001 - one message must not stop the loop
        log.exception("unable to handle %s", method)
        if is_request:
            reply_error(protocol, msg_id, JsonRpcInternalError(f"Internal error handling {method}: {e}"))
        if on_error is not None:
            on_error(e, JsonRpcException)


def is_notification_method(protocol: Any, method: str) -> bool:
    """`method` is one the protocol knows only as a notification: an LSP one whose message
    type has no id, or one of the protocol's own `notifications` (custom methods)."""
    kind = protocol.get_message_type(method)
    if kind is None:
        return method in getattr(protocol, "notifications", frozenset())
    return attrs.has(kind) and "id" not in attrs.fields_dict(kind)


def _decode(body: bytes) -> tuple[Any, bytes] | str:
    """(the JSON value at the start of `body`, the bytes after it), or why there is none."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as e:
        return f"the body is not UTF-8 ({e})"
    start = len(text) - len(text.lstrip())
    try:
        value, end = _DECODER.raw_decode(text, start)
    except RecursionError:
        return "the JSON value is nested too deeply"
    except ValueError as e:
        return str(e)
    rest = text[end:]
    return value, (rest.encode("utf-8") if rest.strip() else b"")


_DECODER = json.JSONDecoder()
_HEAD_ID = re.compile(rb'\A\s*\{\s*(?:"jsonrpc"\s*:\s*"2\.0"\s*,\s*)?"id"\s*:\s*(-?\d{1,18}|"[^"\\]{0,200}")\s*,')


def _request_id(data: Any) -> int | str | None:
    """The id of a request object (JSON-RPC: null when it could not be read)."""
    if not isinstance(data, dict):
        return None
    msg_id = data.get("id")
    return msg_id if isinstance(msg_id, (int, str)) and not isinstance(msg_id, bool) else None


def _truncated_id(body: bytes) -> int | str | None:
    """The id at the head of a body that is not JSON (cut short by a too small
    Content-Length), when the id comes first, as clients write it; else None."""
    m = _HEAD_ID.match(body)
    if m is None:
        return None
    return json.loads(m.group(1))


def _why(exc: BaseException, type_: Any) -> str:
    """A field's error: a validator's own message (a negative line says so), else cattrs'."""
    if type(exc) is ValueError and str(exc):
        return str(exc)
    return format_exception(exc, type_)


def reply_error(protocol: Any, msg_id: int | str | None, error: JsonRpcException) -> None:
    if msg_id is None:  # JSON-RPC: the id is null when it could not be read
        protocol._send_data({"jsonrpc": "2.0", "id": None, "error": {
            "code": error.code, "message": error.message}})
        return
    protocol._send_response(msg_id, error=error.to_response_error())


# -- the LSP lifecycle, enforced before any handler runs (LladaProtocol.handle_message) ---
#
#     new --initialize--> running --shutdown--> shutting down --exit--> (process ends)
#
# - before `initialize`: a request gets ServerNotInitialized (-32002); a notification is
#   dropped; `exit` ends the process (status 1);
# - `initialize` is accepted once: a second one is an InvalidRequest (-32600);
# - after `shutdown`: every request is an InvalidRequest (-32600), notifications but `exit`
#   are dropped (LSP 3.17, "shutdown"); `exit` ends the process (status 0).
#
# A `shutdown` before `initialize` is refused like any request, so an `initialize` after it
# still initializes the server. Responses (to the server's own requests) always pass.

NEW, RUNNING, SHUTTING_DOWN = "new", "running", "shutting down"


@dataclass
class Lifecycle:
    phase: str = NEW

    def admit(self, method: str | None, is_request: bool) -> JsonRpcException | None:
        """Whether a message may be handled now: None, or the error a request gets (a
        refused notification gets none: the caller drops it). Advances the phase."""
        if method is None or method == t.EXIT:
            return None
        refusal = self._refusal(method)
        if refusal is None:
            if method == t.INITIALIZE:
                self.phase = RUNNING
            elif method == t.SHUTDOWN:
                self.phase = SHUTTING_DOWN
            return None
        log.warning("%s %s refused: %s", "request" if is_request else "notification", method,
                    refusal.message)
        return refusal

    def _refusal(self, method: str) -> JsonRpcException | None:
        if self.phase == NEW and method != t.INITIALIZE:
            return JsonRpcServerNotInitialized(
                f"Server not initialized: {method} before initialize")
        if self.phase == RUNNING and method == t.INITIALIZE:
            return JsonRpcInvalidRequest("initialize was already received")
        if self.phase == SHUTTING_DOWN:
            return JsonRpcInvalidRequest(
                f"{method} after shutdown: the server only accepts exit now")
        return None
