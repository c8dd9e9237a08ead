"""The SGLang engine client against the FAKE SGLang server's 0.5.23 behaviours that bite a
client (tests.fakes.sglang): a server that refuses connections while it loads, a `/health`
that runs a generation, one abort per rid, and an abort that can arrive before its request."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from engine.api import Plan
from tests.fakes.checkpoint import END_OF_MIDDLE
from tests.fakes.http_server import HttpRequest, Responder
from tests.fakes.sglang import FakeSglang
from tests.llada_lsp.engines.sglang_helpers import (
    REPLY,
    client,
    collect,
    fake,
    first_draft,
    request,
    serving,
    started,
)

pytestmark = [pytest.mark.asyncio(loop_scope="function")]


async def test_a_server_not_listening_yet_is_loading_then_ready_without_an_error(tok: Path) -> None:
    server = fake(tok, load_s=120.0, ready=False)  # refuses connections until the test ends the load
    url = await server.start()
    eng = client(tok, {"speedy": [url]})
    states: list[str] = []
    eng.on_state = lambda state, _msg: states.append(state)
    msgs: list[str] = []
    refused, warming = asyncio.Event(), asyncio.Event()

    def progress(m: str, _pct: float) -> None:
        msgs.append(m)
        (refused if "not listening yet" in m else warming if "HTTP 503" in m else asyncio.Event()).set()

    try:
        starting = asyncio.create_task(eng.start(progress))
        await asyncio.wait_for(refused.wait(), 20)
        server.finish_loading()  # listening now, 503 while it warms up
        await asyncio.wait_for(warming.wait(), 20)
        server.ready = True
        await asyncio.wait_for(starting, 20)
        assert eng.state == "ready" and eng.error is None
        assert "error" not in states and eng.counters["lost"] == 0
        assert (await collect(eng.submit(request())))[-1].kind == "done"
        assert server.health_rows == 0  # probed by /ready: no generation was queued
    finally:
        await eng.close()
        await server.stop()


async def test_a_server_that_never_listens_is_lost_after_the_start_timeout(tok: Path) -> None:
    server = fake(tok, load_s=60.0)
    url = await server.start()
    eng = client(tok, {"speedy": [url]}, start_timeout_s=0.5)
    try:
        await asyncio.wait_for(eng.start(lambda m, p: None), 20)
        assert eng.state == "error" and url in (eng.error or "") and "retrying" in (eng.error or "")
    finally:
        await eng.close()
        await server.stop()


async def test_a_cancel_before_the_first_chunk_sends_one_abort_that_lands(tok: Path) -> None:
    # the rid is registered at once but reaches the scheduler 0.3 s later: an abort in that
    # window would be forwarded, match nothing, and use up the rid's one abort
    async with serving(tok, reply="q" * 400, dispatch_delay_s=0.3, max_running_requests=1, block_delay_ms=10.0) as (server, eng):
        old = eng.submit(request("1", plan=Plan(max_tokens=300)))
        await server.wait_for(lambda: len(server.received_rids) == 1)
        new = eng.submit(request("2", plan=Plan(max_tokens=8)))  # supersedes `old` in the window
        assert (await collect(old))[-1].reason == "superseded"
        old_rid = server.received_rids[0]
        await server.wait_for(lambda: old_rid in server.aborted_rids)
        sent = [r for r in server.abort_log if r.rid == old_rid]
        assert len(sent) == 1 and sent[0].matched == [old_rid] and not sent[0].dropped
        assert server.timings[old_rid].finished is not None
        assert (await collect(new))[-1].kind == "done"  # the only running slot was let go


async def test_a_cancel_after_the_first_chunk_aborts_once_at_once(tok: Path) -> None:
    async with serving(tok, reply="q" * 400, block_delay_ms=20.0) as (server, eng):
        job = eng.submit(request(plan=Plan(max_tokens=300)))
        assert (await first_draft(job)).kind == "draft"
        rounds = server.rounds
        job.cancel()
        assert (await collect(job))[-1].reason == "cancelled"
        rid = server.received_rids[0]
        await server.wait_for(lambda: rid in server.aborted_rids)
        assert server.rounds <= rounds + 1  # ended at once, not at the budget
        assert [r.rid for r in server.abort_log] == [rid] and eng.counters["aborts_sent"] == 1


async def test_a_busy_server_that_streams_is_not_marked_lost(tok: Path) -> None:
    async with serving(tok, reply="s" * 400, block_delay_ms=20.0) as (server, eng):
        assert eng.pool is not None
        s = eng.pool.servers[0]
        busy = eng.submit(request("1", plan=Plan(max_tokens=300)))
        assert (await first_draft(busy)).kind == "draft"
        server.ready = False  # its readiness probe fails now ...
        await eng.pool.check(s)  # what a timed-out request runs
        assert s.healthy  # ... but it streams: alive
        busy.cancel()
        await collect(busy)
        await eng.pool.check(s)  # nothing streams any more: the failed probe counts
        assert not s.healthy and "HTTP 503" in (s.lost or "")


class OlderServer(FakeSglang):
    """A server without `/ready`, `/model_info` and `/server_info` (SGLang before them): 404, as
    FastAPI answers."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.gets: list[str] = []

    async def _handle(self, req: HttpRequest, resp: Responder) -> None:
        if req.method == "GET":
            self.gets.append(req.path)
        if req.path in ("/ready", "/model_info", "/server_info"):
            await resp.send_json(404, {"detail": "Not Found"})
            return
        await super()._handle(req, resp)


async def test_model_info_first_then_the_deprecated_route_and_health_as_the_fallback_probe(tok: Path) -> None:
    new = fake(tok)
    url = await new.start()
    old = OlderServer(reply=REPLY, tokenizer=tok, end_token_id=END_OF_MIDDLE, block_size=8, block_delay_ms=5.0,
                      health_poll_s=0.05)
    old_url = await old.start()
    eng = client(tok, {"speedy": [url], "quality": [old_url]})
    try:
        await started(eng)
        assert new.health_rows == 0  # /ready and /model_info answered: no /health, no deprecated route
        assert old.gets == ["/ready", "/health", "/model_info", "/get_model_info", "/server_info", "/get_server_info"]
        assert eng.pool is not None and [s.probe_path for s in eng.pool.servers] == ["/ready", "/health"]
    finally:
        await eng.close()
        await new.stop()
        await old.stop()


async def test_a_request_superseded_before_its_first_chunk_ends_for_the_editor_at_once(tok: Path) -> None:
    async with serving(tok, reply="q" * 400, dispatch_delay_s=0.5, block_delay_ms=10.0) as (server, eng):
        old = eng.submit(request("1", plan=Plan(max_tokens=300)))
        await server.wait_for(lambda: len(server.received_rids) == 1)
        eng.submit(request("2", plan=Plan(max_tokens=8)))
        evs = await collect(old, timeout=0.3)  # well before the request even reaches the scheduler
        assert [e.kind for e in evs] == ["done"] and evs[0].reason == "superseded"
        assert server.abort_log == []  # its abort waits until the server holds the rid
        old_rid = server.received_rids[0]
        await server.wait_for(lambda: old_rid in server.aborted_rids)
        assert [r.rid for r in server.abort_log].count(old_rid) == 1
