"""A minimal asyncio HTTP/1.1 client: JSON GET/POST and server-sent events (stdlib only).

What the SGLang backend (`llada_lsp.engines.sglang_engine`) needs and nothing more: one connection
per request (`Connection: close`, so closing a stream is closing its socket, which is how a
superseded completion lets go of its server), a JSON body with `Content-Length`, the
response's status line and headers, a body framed by `Content-Length`, chunked encoding or
the end of the connection, and an SSE reader of `data:` payloads. Connect and read timeouts
are bounded; every failure is one exception type, `HttpError`, with the status and body
when the server answered (status None: it could not be reached or the connection broke).
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

MAX_HEADER_BYTES = 64 * 1024
MAX_BODY_BYTES = 64 * 1024 * 1024
MAX_LINE_BYTES = 4 * 1024 * 1024  # one SSE line (a chunk of cumulative output is far smaller)
READ_PIECE = 64 * 1024  # a chunk's data is read in pieces of at most this (memory stays bounded)
_STATUS = re.compile(r"HTTP/1\.[01] ([0-9]{3})(?: (.*))?")


class HttpError(Exception):
    """A request failed: `status` is the HTTP status the server answered (None when it could
    not be reached, timed out or broke the connection), `body` what it said."""

    def __init__(self, message: str, status: int | None = None, body: bytes = b"", url: str = "",
                 cut: bool = False) -> None:
        super().__init__(message)
        self.status, self.body, self.url = status, body, url
        self.cut = cut  # the server answered, then closed the connection before the body's end

    @property
    def unreachable(self) -> bool:
        """No HTTP answer: refused, reset, timed out (a lost server, as opposed to a refusal)."""
        return self.status is None

    def detail(self) -> str:
        """The server's own message: `{"error": ...}` / `{"detail": ...}` bodies, else the text."""
        text = self.body.decode("utf-8", "replace").strip()
        try:
            obj = json.loads(text) if text else None
        except ValueError:
            return text[:500]
        if isinstance(obj, dict):
            err = obj.get("error", obj.get("detail", obj.get("message")))
            if isinstance(err, dict):
                err = err.get("message", err)
            if err is not None:
                return str(err)[:500]
        return text[:500]


@dataclass(frozen=True)
class Endpoint:
    host: str
    port: int
    base: str  # scheme://host:port, for messages

    @classmethod
    def parse(cls, url: str) -> Endpoint:
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"{url!r} is not an http://host:port URL (https is not supported)")
        port = parts.port or 80
        return cls(parts.hostname, port, f"http://{parts.hostname}:{port}")


class Response:
    """A response whose status and headers are read; the body is read on demand."""

    def __init__(self, url: str, status: int, reason: str, headers: dict[str, str],
                 reader: asyncio.StreamReader, writer: asyncio.StreamWriter, read_timeout: float | None) -> None:
        self.url, self.status, self.reason, self.headers = url, status, reason, headers
        self._reader, self._writer, self._read_timeout = reader, writer, read_timeout

    async def _io(self, coro: Any) -> Any:
        try:
            return await asyncio.wait_for(coro, self._read_timeout)
        except TimeoutError as e:
            self.close()
            raise HttpError(f"{self.url}: no data within {self._read_timeout:g} s", url=self.url) from e
        except asyncio.IncompleteReadError as e:
            self.close()
            raise HttpError(f"{self.url}: the server closed the connection before the end of its answer "
                            "(the stream was cut short)", url=self.url, cut=True) from e
        except (OSError, asyncio.LimitOverrunError) as e:
            self.close()
            why = getattr(e, "strerror", None) or type(e).__name__
            raise HttpError(f"{self.url}: the connection broke before the end of the answer ({why})",
                            url=self.url, cut=True) from e

    def _bad(self, what: str) -> HttpError:
        self.close()
        return HttpError(f"{self.url}: the server broke HTTP framing: {what}", url=self.url)

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body as it arrives (chunked, Content-Length or until the connection closes), in
        pieces of at most READ_PIECE bytes. Bad framing is an HttpError at once."""
        if self.headers.get("transfer-encoding", "").lower() == "chunked":
            while True:
                line = await self._io(self._reader.readuntil(b"\r\n"))
                field = line.split(b";", 1)[0].strip()
                if not re.fullmatch(rb"[0-9a-fA-F]{1,15}", field):
                    raise self._bad(f"chunk size {line[:40]!r}")
                size = int(field, 16)
                if size == 0:
                    while (await self._io(self._reader.readuntil(b"\r\n"))) != b"\r\n":
                        pass  # trailers
                    return
                while size:
                    n = min(size, READ_PIECE)
                    yield await self._io(self._reader.readexactly(n))
                    size -= n
                if await self._io(self._reader.readexactly(2)) != b"\r\n":
                    raise self._bad("a chunk does not end with CRLF")
        elif "content-length" in self.headers:
            raw = self.headers["content-length"]
            if not raw.isascii() or not raw.isdigit():
                raise self._bad(f"Content-Length {raw[:40]!r}")
            n = int(raw)
            if n > MAX_BODY_BYTES:
                self.close()
                raise HttpError(f"{self.url}: a body of {n} bytes is too large", self.status, url=self.url)
            while n:
                data = await self._io(self._reader.readexactly(min(n, READ_PIECE)))
                n -= len(data)
                yield data
        else:
            while data := await self._io(self._reader.read(65536)):
                yield data

    async def body(self) -> bytes:
        out = bytearray()
        async for data in self.chunks():
            out += data
            if len(out) > MAX_BODY_BYTES:
                raise HttpError(f"{self.url}: the body is too large", self.status, url=self.url)
        self.close()
        return bytes(out)

    async def json(self) -> Any:
        raw = await self.body()
        try:
            return json.loads(raw) if raw else None
        except ValueError as e:
            raise HttpError(f"{self.url}: the answer is not JSON: {e}", self.status, raw, self.url) from e

    async def sse(self) -> AsyncIterator[str]:
        """The `data:` payload of each server-sent event (multi-line data joined by newlines).
        Linear in the stream's length: each byte is scanned for a newline once. A line longer
        than MAX_LINE_BYTES (or an event's data longer than that) is an HttpError at once."""
        buf = bytearray()
        data: list[str] = []
        size = 0
        async for piece in self.chunks():
            start = len(buf)  # the bytes before this piece hold no newline
            buf += piece
            begin = 0
            while (nl := buf.find(b"\n", start)) >= 0:
                line = bytes(buf[begin:nl]).rstrip(b"\r").decode("utf-8", "replace")
                begin = start = nl + 1
                if not line:
                    if data:
                        yield "\n".join(data)
                        data, size = [], 0
                elif line.startswith("data:"):
                    data.append(line[5:].removeprefix(" "))
                    size += len(line)
                    if size > MAX_LINE_BYTES:
                        raise self._bad(f"an event longer than {MAX_LINE_BYTES} bytes")
            del buf[:begin]
            if len(buf) > MAX_LINE_BYTES:
                raise self._bad(f"a line longer than {MAX_LINE_BYTES} bytes")
        if data:
            yield "\n".join(data)

    def close(self) -> None:
        """Drop the connection (a stream ends here at once)."""
        transport = self._writer.transport
        if not transport.is_closing():
            transport.abort()


async def request(url: str, method: str, path: str, body: Any = None, *, connect_timeout: float = 5.0,
                  read_timeout: float | None = 30.0, accept: str = "application/json") -> Response:
    """Send one request and read the status line and headers. The caller reads or closes the
    body. Raises HttpError when the server cannot be reached or answers no HTTP."""
    ep = Endpoint.parse(url)
    full = ep.base + path
    payload = b"" if body is None else json.dumps(body).encode()
    head = [f"{method} {path} HTTP/1.1", f"Host: {ep.host}:{ep.port}", "Connection: close",
            f"Accept: {accept}", "User-Agent: llada-lsp"]
    if body is not None:
        head += ["Content-Type: application/json", f"Content-Length: {len(payload)}"]
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(ep.host, ep.port), connect_timeout)
    except TimeoutError as e:
        raise HttpError(f"{full}: no connection within {connect_timeout:g} s", url=full) from e
    except OSError as e:
        raise HttpError(f"{full}: cannot connect: {e.strerror or e}", url=full) from e
    try:
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + payload)
        raw = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), read_timeout)
    except TimeoutError as e:
        writer.transport.abort()
        raise HttpError(f"{full}: no answer within {read_timeout:g} s", url=full) from e
    except asyncio.IncompleteReadError as e:
        writer.transport.abort()
        raise HttpError(f"{full}: the server closed the connection without answering", url=full) from e
    except (OSError, asyncio.LimitOverrunError) as e:
        writer.transport.abort()
        why = getattr(e, "strerror", None) or type(e).__name__
        raise HttpError(f"{full}: the connection broke before an answer ({why})", url=full) from e
    if len(raw) > MAX_HEADER_BYTES:
        writer.transport.abort()
        raise HttpError(f"{full}: headers too large", url=full)
    lines = raw.decode("latin-1").split("\r\n")
    status_line = _STATUS.fullmatch(lines[0])
    if status_line is None:
        writer.transport.abort()
        raise HttpError(f"{full}: not an HTTP answer: {lines[0][:80]!r}", url=full)
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if ":" in line:
            k, v = line.split(":", 1)
            headers[k.strip().lower()] = v.strip()
    status = int(status_line[1])
    if 300 <= status < 400:  # never followed: a server that redirects is misconfigured or hostile
        writer.transport.abort()
        where = headers.get("location", "?")[:200]
        raise HttpError(f"{full}: HTTP {status} redirect to {where!r} refused (redirects are not "
                        "followed: point the setting at the server itself)", status, url=full)
    return Response(full, status, status_line[2] or "", headers, reader, writer, read_timeout)


async def call_json(url: str, method: str, path: str, body: Any = None, *, connect_timeout: float = 5.0,
                    read_timeout: float | None = 30.0) -> Any:
    """The JSON answer of a request; HttpError (with status and body) unless it is 2xx."""
    resp = await request(url, method, path, body, connect_timeout=connect_timeout, read_timeout=read_timeout)
    if resp.status >= 300:
        raw = await resp.body()
        err = HttpError(f"{resp.url}: HTTP {resp.status} {resp.reason}".rstrip(), resp.status, raw, resp.url)
        detail = err.detail()
        if detail:
            err.args = (f"{err.args[0]}: {detail}",)
        raise err
    return await resp.json()


async def get_json(url: str, path: str, **kw: Any) -> Any:
    return await call_json(url, "GET", path, **kw)


async def post_json(url: str, path: str, body: Any, **kw: Any) -> Any:
    return await call_json(url, "POST", path, body, **kw)
