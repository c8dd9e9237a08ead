"""Hostile SGLang answers (issue 41, finding 4): a bad status line, bad chunk framing, each
malformed field shape of a stream event, an endless line and a redirect end their request at
once with a clear error, and a server that answered garbage is still recovered.

The server is the FAKE SGLang server (tests.fakes.sglang) with `/generate` (or `/ready`)
replaced by scripted bytes; the connection then stays open until the client closes it, so
only the client's own checks can end the request before its deadline."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from llada_lsp.engines import http_client as http
from tests.fakes.http_server import HttpRequest, Responder
from tests.fakes.sglang import FakeSglang
from tests.llada_lsp.engines.sglang_helpers import collect, request, serving

pytestmark = [pytest.mark.asyncio(loop_scope="function")]

OK_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
META = {"id": "x", "finish_reason": None, "prompt_tokens": 3, "completion_tokens": 1, "cached_tokens": 0}


def event(obj: Any) -> bytes:
    data = b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n"
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


# Each shape the stream parser reads, broken one way (the client must refuse it at once).
BAD_EVENTS: dict[str, bytes] = {
    "not JSON": event(b"{nope"),
    "an array": event([1, 2]),
    "a string": event("text"),
    "no output_ids": event({"text": "", "meta_info": META}),
    "output_ids a string": event({"output_ids": "abc", "meta_info": META}),
    "output_ids holding a string": event({"output_ids": ["x"], "meta_info": META}),
    "output_ids holding a float": event({"output_ids": [1.5], "meta_info": META}),
    "output_ids holding a bool": event({"output_ids": [True], "meta_info": META}),
    "output_ids holding a negative id": event({"output_ids": [-1], "meta_info": META}),
    "output_ids holding a huge id": event({"output_ids": [1 << 40], "meta_info": META}),
    "meta_info a list": event({"output_ids": [1], "meta_info": []}),
    "no meta_info": event({"output_ids": [1]}),
    "finish_reason a string": event({"output_ids": [1], "meta_info": {**META, "finish_reason": "stop"}}),
    "finish_reason without a type": event({"output_ids": [1], "meta_info": {**META, "finish_reason": {"x": 1}}}),
    "completion_tokens a string": event({"output_ids": [1], "meta_info": {**META, "completion_tokens": "1"}}),
    "prompt_tokens negative": event({"output_ids": [1], "meta_info": {**META, "prompt_tokens": -3,
                                                                      "finish_reason": {"type": "length"}}}),
    "cached_tokens a list": event({"output_ids": [1], "meta_info": {**META, "cached_tokens": [0],
                                                                    "finish_reason": {"type": "length"}}}),
}
BAD_FRAMING: dict[str, bytes] = {
    "status line with a superscript digit": b"HTTP/1.1 \xb2 OK\r\n\r\n",  # latin-1 '²': str.isdigit() is True
    "status line with a UTF-8 superscript": "HTTP/1.1 ² OK\r\n\r\n".encode(),
    "status line of two digits": b"HTTP/1.1 20 OK\r\n\r\n",
    "not HTTP": b"SSH-2.0-OpenSSH_9.6\r\n\r\n",
    "chunk size not hex": OK_HEAD + b"zz\r\ndata: {}\n\n\r\n",
    "chunk size negative": OK_HEAD + b"-5\r\n",
    "chunk without its CRLF": OK_HEAD + b"3\r\nabcXY",
    "Content-Length not a number": b"HTTP/1.1 200 OK\r\ncontent-length: 1e3\r\n\r\n",
    "a redirect": b"HTTP/1.1 307 Temporary Redirect\r\nlocation: http://evil.example/generate\r\ncontent-length: 0\r\n\r\n",
}


class Hostile(FakeSglang):
    """`/generate` answers `raw` (then holds the connection open until the client leaves);
    `/ready` answers `bad_ready` bytes for its first `bad_ready_times` calls."""

    def __init__(self, raw: bytes = b"", bad_ready: bytes = b"", bad_ready_times: int = 0, **kw: Any) -> None:
        super().__init__(**kw)
        self.raw, self.bad_ready, self.bad_ready_times = raw, bad_ready, bad_ready_times
        self.generate_calls = 0

    async def _generate(self, req: HttpRequest, resp: Responder) -> None:
        self.generate_calls += 1
        await self._raw(self.raw, req, resp)

    async def _ready(self, req: HttpRequest, resp: Responder) -> None:
        if self.bad_ready_times > 0:
            self.bad_ready_times -= 1
            await self._raw(self.bad_ready, req, resp)
        else:
            await super()._ready(req, resp)

    @staticmethod
    async def _raw(raw: bytes, req: HttpRequest, resp: Responder) -> None:
        resp.writer.write(raw)
        resp.sent = True
        await resp.writer.drain()
        await req.reader.read()  # until the client closes: no end of stream from this side


@pytest.mark.parametrize("name", sorted(BAD_EVENTS))
async def test_each_malformed_event_is_an_error_at_once(tok: Path, name: str) -> None:
    async with serving(tok, Hostile(OK_HEAD + BAD_EVENTS[name])) as (server, eng):
        # the request's own deadlines are the defaults (seconds); the error must come first
        evs = await collect(eng.submit(request()), timeout=3)
        assert evs[-1].kind == "error", (name, evs[-1])
        assert "bad answer" in (evs[-1].error or "") or "bad event" in (evs[-1].error or ""), evs[-1].error
        assert eng.state == "ready"  # a bad answer is not a lost server


@pytest.mark.parametrize("name", sorted(BAD_FRAMING))
async def test_bad_framing_is_an_http_error_at_once(name: str) -> None:
    server = Hostile(BAD_FRAMING[name])
    url = await server.start()
    try:
        async def read() -> None:
            resp = await http.request(url, "POST", "/generate", {"input_ids": [1]}, read_timeout=30)
            async for _ in resp.sse():
                pass

        with pytest.raises(http.HttpError) as err:
            await asyncio.wait_for(read(), 3)
        if name == "a redirect":
            assert err.value.status == 307 and "redirect" in str(err.value) and "evil.example" in str(err.value)
    finally:
        await server.stop()


async def test_a_redirected_generate_is_an_error_event_naming_it(tok: Path) -> None:
    async with serving(tok, Hostile(BAD_FRAMING["a redirect"])) as (server, eng):
        ev = (await collect(eng.submit(request()), timeout=3))[-1]
        assert ev.kind == "error" and "redirect" in (ev.error or "") and "refused" in (ev.error or "")


async def test_recovery_survives_garbage_answers(tok: Path) -> None:
    async with serving(tok, Hostile(bad_ready=BAD_FRAMING["status line with a superscript digit"])) as (server, eng):
        states: list[str] = []
        back = asyncio.Event()

        def heard(state: str, _msg: str) -> None:
            states.append(state)
            if state == "ready":
                back.set()

        eng.on_state = heard
        assert eng.pool is not None
        server.bad_ready_times = 3  # the next three probes read a bad status line
        eng.pool.mark_lost(eng.pool.servers[0], "test: lost")
        await asyncio.wait_for(back.wait(), 10)
        assert states == ["error", "ready"] and server.bad_ready_times == 0


class Endless(FakeSglang):
    """`/generate` streams one SSE line that never ends; `sent` counts the bytes written."""

    def __init__(self, total: int, **kw: Any) -> None:
        super().__init__(**kw)
        self.total, self.sent = total, 0

    async def _generate(self, req: HttpRequest, resp: Responder) -> None:
        await resp.start_stream()
        piece = b"data: " + b"7" * (256 * 1024)
        try:
            while self.sent < self.total:
                await resp.chunk(piece)
                self.sent += len(piece)
        except ConnectionError:
            return


async def test_an_endless_line_stops_at_the_bound_without_reading_the_rest() -> None:
    total = 100 * 1024 * 1024
    server = Endless(total)
    url = await server.start()
    try:
        resp = await http.request(url, "POST", "/generate", {"input_ids": [1]}, read_timeout=30)
        with pytest.raises(http.HttpError, match="longer than"):
            async for _ in resp.sse():
                pass
        # the client stopped at its bound: the server wrote the bound plus what the socket buffers hold
        assert server.sent < http.MAX_LINE_BYTES + 16 * 1024 * 1024 < total
    finally:
        await server.stop()


async def test_events_split_at_every_byte_read_the_same() -> None:
    """The line scanner keeps its place across pieces: a stream chunked one byte at a time
    (CRLF line ends, multi-line data) gives the same events as one piece."""
    text = b"data: {\"a\": 1}\r\n\r\n: comment\n\ndata: one\r\ndata: two\n\nevent: x\ndata: [DONE]\n\n"
    whole = OK_HEAD + f"{len(text):x}\r\n".encode() + text + b"\r\n0\r\n\r\n"
    split = OK_HEAD + b"".join(b"1\r\n" + text[i:i + 1] + b"\r\n" for i in range(len(text))) + b"0\r\n\r\n"
    got = []
    for raw in (whole, split):
        server = Hostile(raw)
        url = await server.start()
        try:
            resp = await http.request(url, "POST", "/generate", {}, read_timeout=5)
            got.append([e async for e in resp.sse()])
        finally:
            await server.stop()
    assert got[0] == got[1] == ['{"a": 1}', "one\ntwo", "[DONE]"]
