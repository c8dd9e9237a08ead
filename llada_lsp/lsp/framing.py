"""`Content-Length` framing of the stdio stream, resynchronising after any fault.

`Frames.next()` returns the next thing on the stream: a body, a refused oversize frame, or
a run of junk (bytes that belong to no frame) that ended at a header. A wrong
`Content-Length` never deafens the server:

- a length too large swallows the start of the next header; the body then holds a whole
  JSON value followed by the head of that header, which is pushed back onto the stream
  (`unread`), so that both messages are read as sent (`stdio.dispatch` does this);
- a length too small leaves the body's tail in front of the next header; the header is
  found at the end of that line (`Content-Length:` anywhere in a line, last match, ends
  it), the bytes before it are reported as junk, and reading goes on from the header;
- a length too large that the next messages never fill (the server would wait for bytes that
  never come) is cut where the next header shows up: a body is read as it arrives, and a
  `Content-Length:` header line inside it (never valid JSON: raw newlines cannot be in a JSON
  string) ends it there, at once;
- a length above `max_frame` is refused without reading it (`Oversize`); its bytes are junk
  up to the next header;
- a header damaged otherwise loses at most its own message: its body is read as junk up to
  the next header, and answered (with the request's id when the junk is a whole request).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

CONTENT_LENGTH = re.compile(rb"content-length:[ \t]*(\d+)[ \t]*\r?\n?\Z", re.IGNORECASE)
HEADER = re.compile(rb"[A-Za-z0-9!#$%&'*+.^_`|~-]+:[^\r\n]*\r?\n?\Z")
HEADER_IN_BODY = re.compile(rb"content-length:[ \t]*\d+[ \t]*\r?\n", re.IGNORECASE)
HEADER_HEAD = re.compile(rb"[A-Za-z0-9!#$%&'*+.^_`|~-]+(:[^\r\n]*)?(\r?\n|\r?\Z)")
JUNK_SAMPLE = 80  # bytes of junk quoted in the log


@dataclass
class Body:
    data: bytes


@dataclass
class Oversize:
    length: int


@dataclass
class Junk:
    data: bytes  # up to `keep` bytes of it (the start)
    size: int  # bytes skipped in all


Frame = Body | Oversize | Junk


class PushbackReader:
    """An async reader (`readline`, `readexactly`) with bytes pushed back in front."""

    def __init__(self, reader: Any) -> None:
        self.reader = reader
        self.pending = b""

    def unread(self, data: bytes) -> None:
        self.pending = data + self.pending

    async def readline(self) -> bytes:
        if b"\n" in self.pending:
            i = self.pending.index(b"\n") + 1
            line, self.pending = self.pending[:i], self.pending[i:]
            return line
        head, self.pending = self.pending, b""
        return head + await self.reader.readline()

    async def read(self, n: int) -> bytes:
        """Up to `n` bytes, as soon as some are there (b"" at the end); the reader must have `read`."""
        if self.pending:
            head, self.pending = self.pending[:n], self.pending[n:]
            return head
        return bytes(await self.reader.read(n))

    async def readexactly(self, n: int) -> bytes:
        head, self.pending = self.pending[:n], self.pending[n:]
        if len(head) == n:
            return head
        rest = await self.reader.readexactly(n - len(head))
        return head + rest if rest else head


class Frames:
    """The frames of one stream (see the module docstring)."""

    def __init__(self, reader: Any, max_frame: int, keep: int = 1 << 16) -> None:
        self.reader = reader if isinstance(reader, PushbackReader) else PushbackReader(reader)
        self.max_frame = max_frame
        self.keep = keep  # junk bytes kept to look for a lost request's id
        self.resyncs = 0  # junk runs skipped before a header

    def unread(self, data: bytes) -> None:
        self.reader.unread(data)

    async def next(self) -> Frame | None:
        """The next frame; None at the end of the stream (also inside a frame)."""
        length: int | None = None
        junk, junk_size = b"", 0
        while True:
            try:
                line = await self.reader.readline()
            except ValueError:  # a line over the reader's limit: junk
                junk_size += 1
                continue
            if not line:
                return Junk(junk, junk_size) if junk_size else None
            m = CONTENT_LENGTH.search(line)
            if m is not None:
                before = line[:m.start()]
                if before.strip() or junk_size:
                    # the junk ends here: report it, then read this header again
                    self.reader.unread(line[m.start():])
                    self.resyncs += 1
                    return Junk((junk + before)[:self.keep], junk_size + len(before))
                length = int(m.group(1))
                continue
            if not line.strip():
                if length is None:
                    continue  # a blank line with no Content-Length before it
                return await self._body(length)
            if junk_size or not HEADER.match(line):
                length = None  # a header block broken by junk: its length is void
                junk_size += len(line)
                if len(junk) < self.keep:
                    junk += line[: self.keep - len(junk)]
            # a well-formed header other than Content-Length is ignored

    async def _body(self, n: int) -> Frame | None:
        if n > self.max_frame:
            return Oversize(n)
        if not hasattr(self.reader.reader, "read"):  # a reader without partial reads
            body = await self.reader.readexactly(n) if n else b""
            return Body(body) if len(body) == n else None
        parts: list[bytes] = []
        got = 0
        tail = b""  # the end of the bytes before, where a header may have begun
        while got < n:
            chunk = await self.reader.read(min(n - got, 1 << 20))
            if not chunk:
                return None  # the stream ended inside a message
            window = tail + chunk
            m = HEADER_IN_BODY.search(window)
            if m is not None:  # the next message's header: this body ends before it
                cut = got - len(tail) + m.start()
                self.reader.unread(window[m.start():])
                self.resyncs += 1
                data = b"".join(parts) + chunk
                return Body(data[:cut])
            parts.append(chunk)
            got += len(chunk)
            tail = window[-64:]
        return Body(b"".join(parts))


def header_head(data: bytes) -> bool:
    """Whether `data` (the bytes after a body's JSON value) starts like a header line, or
    the start of one: the Content-Length before the body was too large and swallowed the
    start of the next message."""
    return HEADER_HEAD.match(data.lstrip(b" \t\r\n")) is not None


def sample(data: bytes) -> str:
    s = data[:JUNK_SAMPLE]
    return repr(s) + ("..." if len(data) > JUNK_SAMPLE else "")
