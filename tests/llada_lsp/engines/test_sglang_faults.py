"""An SGLang server that fails one request (issue 49 §4): a stream cut short ends its request
with a clear message (not a library's), a single HTTP 503 is sent again to another server and
never flaps the state to lost and back, and `LOST_AFTER` failures in a row do mark it lost.

The servers are the FAKE SGLang server (tests.fakes.sglang) with `/generate` scripted."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from engine.api import Plan
from llada_lsp.engines.sglang_engine import SglangEngineClient
from llada_lsp.engines.sglang_servers import LOST_AFTER
from tests.fakes.checkpoint import END_OF_MIDDLE
from tests.fakes.http_server import HttpRequest, Responder
from tests.fakes.sglang import FakeSglang
from tests.llada_lsp.engines.sglang_helpers import (
    REPLY,
    client,
    collect,
    fake,
    request,
    serving,
    started,
)

pytestmark = [pytest.mark.asyncio(loop_scope="function")]

OK_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


class Scripted(FakeSglang):
    """`/generate`: its first `times` calls answer `raw` and close the connection (-1: every
    call), the others as the fake does."""

    def __init__(self, tok: Path, raw: bytes, times: int = 1, **kw: Any) -> None:
        super().__init__(reply=REPLY, tokenizer=tok, end_token_id=END_OF_MIDDLE, block_size=8, block_delay_ms=5.0,
                         max_running_requests=8, **kw)
        self.raw, self.times = raw, times
        self.scripted = 0

    async def _generate(self, req: HttpRequest, resp: Responder) -> None:
        if self.times == 0:
            await super()._generate(req, resp)
            return
        self.times -= 1
        self.scripted += 1
        resp.writer.write(self.raw)
        resp.sent = True
        await resp.writer.drain()
        resp.writer.close()


BUSY = b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: 28\r\n\r\n" \
       b'{"error": "server is busy"}\n'


def watch(eng: SglangEngineClient) -> list[tuple[str, str]]:
    heard: list[tuple[str, str]] = []
    eng.on_state = lambda state, msg: heard.append((state, msg))
    return heard


@pytest.mark.parametrize("cut", [b"40\r\ndata: {\"output_ids\": [1, 2", b""], ids=["inside a chunk", "after the head"])
async def test_a_stream_cut_short_is_a_clear_error_and_no_lost_server(tok: Path, cut: bytes) -> None:
    async with serving(tok, Scripted(tok, OK_HEAD + cut)) as (server, eng):
        heard = watch(eng)
        ev = (await collect(eng.submit(request()), timeout=5))[-1]
        assert ev.kind == "error" and "cut its answer short" in (ev.error or ""), ev
        assert "bytes read" not in (ev.error or "") and "expected bytes" not in (ev.error or "")
        done = (await collect(eng.submit(request("2", plan=Plan(max_tokens=16))), timeout=5))[-1]
        assert done.kind == "done" and heard == [] and eng.state == "ready"


async def test_a_single_503_goes_to_another_server_and_never_flaps(tok: Path) -> None:
    busy, other = Scripted(tok, BUSY), fake(tok)
    urls = [await busy.start(), await other.start()]
    eng = await started(client(tok, {"speedy": urls}))
    heard = watch(eng)
    try:
        done = (await collect(eng.submit(request("1", plan=Plan(max_tokens=16)))))[-1]
        assert busy.scripted == 1 and done.kind == "done" and done.text
        assert done.stats is not None and done.stats["server"] == urls[1]
        assert eng.counters["retries"] == 1 and heard == [] and all(s.healthy for s in eng.pool.servers)  # type: ignore[union-attr]
    finally:
        await eng.close()
        await busy.stop()
        await other.stop()


async def test_one_503_of_the_only_server_fails_that_request_alone(tok: Path) -> None:
    async with serving(tok, Scripted(tok, BUSY)) as (server, eng):
        heard = watch(eng)
        ev = (await collect(eng.submit(request()), timeout=5))[-1]
        assert ev.kind == "error" and "HTTP 503" in (ev.error or "") and "server is busy" in (ev.error or "")
        done = (await collect(eng.submit(request("2", plan=Plan(max_tokens=16))), timeout=5))[-1]
        assert done.kind == "done" and heard == [] and eng.state == "ready"


async def test_lost_after_failures_in_a_row(tok: Path) -> None:
    async with serving(tok, Scripted(tok, BUSY, times=-1)) as (server, eng):
        heard = watch(eng)
        for i in range(LOST_AFTER):
            assert heard == []
            ev = (await collect(eng.submit(request(str(i))), timeout=5))[-1]
            assert ev.kind == "error" and "HTTP 503" in (ev.error or "")
        assert [s for s, _ in heard] == ["error"] and f"{LOST_AFTER} requests failed in a row" in heard[0][1]
