"""A minimal HTTP/1.1 server and client on asyncio streams, for the loopback fakes only.

A fake for tests and benches (see `tests.fakes.sglang`): just enough HTTP to stand in for
uvicorn in front of SGLang. Requests: request line, headers, a `Content-Length` body (no
chunked request bodies). Responses: `Content-Length` bodies, or a streamed body with
`Transfer-Encoding: chunked` as uvicorn sends a Starlette `StreamingResponse`. Connections
stay open between requests (HTTP/1.1 keep-alive) unless the client sends `Connection: close`.
Not modelled: TLS, pipelining, `Expect: 100-continue`, request trailers.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any
from urllib.parse import urlsplit

MAX_HEADER_LINES = 100


@dataclass
class HttpRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    reader: asyncio.StreamReader = field(repr=False)
    carry: bytes = b""  # bytes of the client's next request read while watching this one

    def json(self) -> Any:
        return json.loads(self.body.decode("utf-8")) if self.body else None


class Watch:
    """Notices a client that goes away while its response is produced (uvicorn hears it as
    the connection's `connection_lost`), without breaking keep-alive: the one pending read
    is finished before the connection reads its next request (two readers on one stream
    raise `readuntil() called while another coroutine is already waiting`), and a byte of
    that next request read meanwhile is handed on (`HttpRequest.carry`)."""

    def __init__(self, req: HttpRequest) -> None:
        self.req = req
        self.task: asyncio.Task[bytes] = asyncio.create_task(req.reader.read(1))

    async def gone(self) -> bool:
        """Waits until the client goes away (True) or sends more (False: keep serving)."""
        await asyncio.wait({self.task})
        return await self._settle()

    async def _settle(self) -> bool:
        if self.task.cancelled():
            return False
        exc = self.task.exception()
        if exc is not None:
            return True
        data = self.task.result()
        self.req.carry += data
        return not data

    async def close(self) -> None:
        if not self.task.done():
            self.task.cancel()
        await asyncio.wait({self.task})
        await self._settle()


class Responder:
    """Writes one response: either `send` (whole body) or `start_stream`/`chunk`/`end_stream`."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        self.sent = False

    def _head(self, status: int, headers: dict[str, str]) -> bytes:
        reason = HTTPStatus(status).phrase
        lines = [f"HTTP/1.1 {status} {reason}"] + [f"{k}: {v}" for k, v in headers.items()]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    async def send(self, status: int, body: bytes = b"", content_type: str = "application/json") -> None:
        headers = {"content-length": str(len(body))}
        if body:
            headers["content-type"] = content_type
        self.writer.write(self._head(status, headers) + body)
        self.sent = True
        await self.writer.drain()

    async def send_json(self, status: int, obj: Any) -> None:
        await self.send(status, json.dumps(obj).encode("utf-8"))

    async def start_stream(self, status: int = 200, content_type: str = "text/event-stream") -> None:
        head = {"content-type": f"{content_type}; charset=utf-8", "transfer-encoding": "chunked"}
        self.writer.write(self._head(status, head))
        self.sent = True
        await self.writer.drain()

    async def chunk(self, data: bytes) -> None:
        if data:
            self.writer.write(f"{len(data):x}\r\n".encode("ascii") + data + b"\r\n")
            await self.writer.drain()

    async def end_stream(self) -> None:
        self.writer.write(b"0\r\n\r\n")
        await self.writer.drain()


Handler = Callable[[HttpRequest, Responder], Awaitable[None]]


async def read_request(reader: asyncio.StreamReader, carry: bytes = b"") -> HttpRequest | None:
    """One request from the stream (after `carry`, its first bytes if already read), or None
    at a clean end of the connection."""
    line = carry + await reader.readline()
    if not line:
        return None
    parts = line.decode("latin-1").strip().split(" ")
    if len(parts) != 3:
        raise ValueError(f"bad request line {line!r}")
    method, target, _version = parts
    headers = await _read_headers(reader)
    length = int(headers.get("content-length", "0"))
    body = await reader.readexactly(length) if length else b""
    return HttpRequest(method.upper(), urlsplit(target).path, headers, body, reader)


async def _read_headers(reader: asyncio.StreamReader) -> dict[str, str]:
    headers: dict[str, str] = {}
    for _ in range(MAX_HEADER_LINES):
        raw = await reader.readline()
        if raw in (b"\r\n", b"\n", b""):
            return headers
        name, _, value = raw.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    raise ValueError("too many header lines")


class HttpServer:
    """Serves `handler` on a TCP port; `stop` closes the listener and every open connection."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self._server: asyncio.Server | None = None
        self._conns: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self, host: str, port: int) -> int:
        self._server = await asyncio.start_server(self._serve, host, port)
        return int(self._server.sockets[0].getsockname()[1])

    async def start_on(self, sock: socket.socket) -> None:
        """Listens on a socket already bound (connections were refused until now)."""
        self._server = await asyncio.start_server(self._serve, sock=sock)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for w in list(self._conns):
            w.close()
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        self._conns.add(writer)
        carry = b""
        try:
            while True:
                req = await read_request(reader, carry)
                if req is None:
                    break
                resp = Responder(writer)
                await self.handler(req, resp)
                if not resp.sent:
                    await resp.send(500)
                if req.headers.get("connection", "").lower() == "close":
                    break
                carry = req.carry
        except (ConnectionError, asyncio.IncompleteReadError, ValueError):
            pass
        finally:
            self._conns.discard(writer)
            if task is not None:
                self._tasks.discard(task)
            writer.close()


# ---- a small client (the router fake forwards with it; tests may use it too) ----


@dataclass
class ClientResponse:
    status: int
    headers: dict[str, str]
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter

    async def body(self) -> bytes:
        if self.headers.get("transfer-encoding", "").lower() == "chunked":
            return b"".join([c async for c in self.chunks()])
        length = int(self.headers.get("content-length", "0"))
        return await self.reader.readexactly(length) if length else b""

    async def chunks(self) -> AsyncIterator[bytes]:
        """The raw chunks of a chunked body, as the server wrote them."""
        while True:
            size_line = await self.reader.readline()
            if not size_line:
                return
            size = int(size_line.strip().split(b";")[0], 16)
            if size == 0:
                await self.reader.readline()
                return
            data = await self.reader.readexactly(size)
            await self.reader.readexactly(2)
            yield data

    def close(self) -> None:
        self.writer.close()


async def request(url: str, method: str, path: str, payload: Any = None) -> ClientResponse:
    """Opens a connection to `url` and sends one request (`Connection: close`)."""
    parts = urlsplit(url)
    reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
    body = b"" if payload is None else json.dumps(payload).encode("utf-8")
    head = f"{method} {path} HTTP/1.1\r\nhost: {parts.netloc}\r\nconnection: close\r\n"
    if payload is not None:
        head += "content-type: application/json\r\n"
    head += f"content-length: {len(body)}\r\n\r\n"
    writer.write(head.encode("latin-1") + body)
    await writer.drain()
    status_line = await reader.readline()
    status = int(status_line.split(b" ")[1])
    headers = await _read_headers(reader)
    return ClientResponse(status, headers, reader, writer)
