"""Serve LSP over stdio without a thread hop per read.

pygls reads stdin through `run_in_executor` (one worker-thread round trip per header line and
per body). With the engine thread holding the GIL most of the time, each round trip can wait
a whole GIL switch interval, several per message. Here stdin, when it is a pipe or a socket,
is read by the event loop itself (`connect_read_pipe`); anything else (a file, a TTY) falls
back to pygls' reader.

The message loop is the server's own (`serve_messages`), not pygls': bad input gets the
JSON-RPC error a client can act on wherever one can be sent, and never stops the loop. A
body that is not JSON is a Parse error (-32700, id null); one that is not a request object
(a batch, a non-string method) an Invalid Request (-32600); a request whose params do not
match the method's types gets Invalid Params (-32602) naming the fields, with its id (pygls
logs these and never answers, so the client waits forever); a notification with bad params
is logged and dropped; a Content-Length over `MAX_FRAME` is refused and the stream resyncs
at the next header.
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
from typing import Any, BinaryIO

from cattrs import transform_error
from cattrs.errors import ClassValidationError
from cattrs.v import format_exception
from pygls.exceptions import (
    JsonRpcException,
    JsonRpcInternalError,
    JsonRpcInvalidParams,
    JsonRpcInvalidRequest,
    JsonRpcParseError,
)
from pygls.io_ import StdinAsyncReader, StdoutWriter

log = logging.getLogger(__name__)

MAX_FRAME = 2**28  # bytes of one message body (a 1 MB document is ~2 MB of JSON)
CONTENT_LENGTH = re.compile(rb"content-length:\s*(\d+)\s*", re.IGNORECASE)


class PipeReader:
    """pygls' AsyncReader interface over an asyncio StreamReader (b"" at the end)."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self.reader = reader

    async def readline(self) -> bytes:
        return await self.reader.readline()

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

    try:
        asyncio.run(main())
    except BrokenPipeError:
        log.error("connection to the client is lost: shutting down")
    except (KeyboardInterrupt, SystemExit):
        pass
    finally:
        server.shutdown()


async def serve_messages(reader: Any, protocol: Any, stop: threading.Event,
                         max_frame: int = MAX_FRAME,
                         on_error: Callable[[Exception, type[JsonRpcException]], Any] | None = None
                         ) -> None:
    """Read `Content-Length`-framed messages from `reader` until EOF or `stop`, and hand
    each to `protocol` (see the module docstring for what bad input gets)."""
    length: int | None = None
    while not stop.is_set():
        try:
            line = await reader.readline()
        except ValueError:  # a line over the reader's limit: not a header
            log.error("dropped a line over the reader's limit while looking for a header")
            length = None
            continue
        if not line:
            return
        if line.strip():
            m = CONTENT_LENGTH.fullmatch(line)
            if m:
                length = int(m.group(1))
            continue  # Content-Type and unknown headers are ignored
        if length is None:
            continue  # a blank line with no Content-Length before it
        n, length = length, None
        if n > max_frame:
            log.error("a message of %d bytes is over the %d byte limit: skipped", n, max_frame)
            reply_error(protocol, None, JsonRpcInvalidRequest(
                f"message of {n} bytes is over the server's limit of {max_frame} bytes"))
            continue
        body = await reader.readexactly(n) if n else b""
        if n and len(body) < n:
            return  # the stream ended inside a message
        dispatch(protocol, body, on_error)


def dispatch(protocol: Any, body: bytes, on_error: Callable[..., Any] | None = None) -> None:
    """Parse, type and hand over one message body; errors as the module docstring says."""
    try:
        data = json.loads(body)
    except ValueError as e:  # not UTF-8, not JSON
        reply_error(protocol, None, JsonRpcParseError(f"Parse error: {e}"))
        return
    if not isinstance(data, dict) or not isinstance(data.get("method", ""), str):
        msg_id = data.get("id") if isinstance(data, dict) else None
        reply_error(protocol, msg_id if isinstance(msg_id, (int, str)) else None, JsonRpcInvalidRequest(
            "Invalid Request: a message is one JSON object with a string method (no batches)"))
        return
    method, msg_id = data.get("method"), data.get("id")
    is_request = method is not None and isinstance(msg_id, (int, str))
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
