"""Serve LSP over stdio without a thread hop per read.

pygls reads stdin through `run_in_executor` (one worker-thread round trip per header line and
per body). With the engine thread holding the GIL most of the time, each round trip can wait
a whole GIL switch interval, several per message. Here stdin, when it is a pipe or a socket,
is read by the event loop itself (`connect_read_pipe`); anything else (a file, a TTY) falls
back to pygls' reader.
"""

from __future__ import annotations

import asyncio
import logging
import os
import stat
import sys
from typing import Any, BinaryIO

from pygls.io_ import StdinAsyncReader, StdoutWriter, run_async

log = logging.getLogger(__name__)


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
    import threading

    stdin = stdin or sys.stdin.buffer
    server._stop_event = threading.Event()  # pygls' shutdown() sets it
    server.protocol.set_writer(StdoutWriter(stdout or sys.stdout.buffer))

    async def main() -> None:
        reader: Any = await pipe_reader(stdin)
        if reader is None:
            log.info("stdin is not a pipe: reading it in a worker thread")
            reader = StdinAsyncReader(stdin, server.thread_pool)
        await run_async(stop_event=server._stop_event, reader=reader, protocol=server.protocol,
                        logger=log, error_handler=server.report_server_error)

    try:
        asyncio.run(main())
    except BrokenPipeError:
        log.error("connection to the client is lost: shutting down")
    except (KeyboardInterrupt, SystemExit):
        pass
    finally:
        server.shutdown()
