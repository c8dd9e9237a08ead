"""The SGLang engine client (llada_lsp.engines.sglang_engine) against the FAKE SGLang server
(tests.fakes.sglang, loopback, no model) in this process: streaming, stops, aborts, errors,
start-up, loss and recovery, load balancing, router fan-out."""

from __future__ import annotations

import asyncio
import re
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from engine.api import Plan
from engine.model.model_path import CHECKPOINTS_DIR
from llada_lsp.engines.capabilities import Capabilities
from llada_lsp.engines.sglang_engine import SglangEngineClient
from tests.fakes.sglang import FakeRouter, FakeSglang
from tests.llada_lsp.engines.sglang_helpers import (
    PREFIX,
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


def aborted_at(server: FakeSglang, rid: str) -> bool:
    return any(r.rid == rid for r in server.abort_log)


def progress(msgs: list[str]) -> Any:
    return lambda m, _pct: msgs.append(m)


async def test_blocks_stream_as_draft_events_then_done(tok: Path) -> None:
    async with serving(tok) as (server, eng):
        evs = await collect(eng.submit(request()))
        drafts, done = evs[:-1], evs[-1]
        assert len(drafts) >= 3 and all(e.kind == "draft" and e.draft_complete for e in drafts)
        text = ""
        for e in drafts:  # cumulative text: each event's extends the previous one's
            assert e.text.startswith(text)
            text = e.text
        assert done.kind == "done" and done.reason == "end_of_middle" and done.text == REPLY == text
        st = done.stats or {}
        assert st["forwards"] is None and st["tpf"] is None  # not reported by SGLang: never invented
        rid = server.received_rids[0]
        assert re.fullmatch(r"llada-[0-9a-f]{8}-\d{10}", rid) and st["rid"] == rid
        assert eng.builder is not None
        assert st["prompt_tokens"] == len(eng.builder.layout(PREFIX, "", heal=False, doc_key="file:///a.py").ids)
        assert st["tokens"] == len(eng.builder.encode(REPLY)) + 1  # with the end-of-middle token
        assert st["cached_tokens"] == 0 and st["total_ms"] >= st["first_draft_ms"] > 0
        assert eng.info["backend"] == "sglang" and eng.info["edits"] is False and eng.info["alternatives"] == 1
        # a LLaDA2.0 checkpoint, LowConfidence: neither (test_sglang_models); status keys, no decision
        assert eng.info["block_routing"] is False and eng.info["indel"] is False
        assert eng.caps == Capabilities(edits=False, remask=False, alternatives=1, next_edit=False, names=False)


async def test_stop_rule_cuts_locally_and_aborts_on_the_server(tok: Path) -> None:
    async with serving(tok, block_delay_ms=20.0) as (server, eng):
        evs = await collect(eng.submit(request(plan=Plan(max_tokens=64, stop="line"))))
        done = evs[-1]
        assert done.reason == "stop_rule" and done.text == "    return a + b"
        rid = server.received_rids[0]
        await server.wait_for(lambda: rid in server.aborted_rids)  # the row ended by our abort
        assert [r.rid for r in server.abort_log] == [rid]


async def test_newer_request_supersedes_and_aborts_the_older(tok: Path) -> None:
    async with serving(tok, block_delay_ms=30.0, reply=REPLY * 4) as (server, eng):
        old = eng.submit(request("1", plan=Plan(max_tokens=200)))
        assert (await first_draft(old)).kind == "draft"
        new = eng.submit(request("2", plan=Plan(max_tokens=8)))
        old_rest = await collect(old)
        assert old_rest[-1].kind == "done" and old_rest[-1].reason == "superseded"
        old_rid = server.received_rids[0]
        await server.wait_for(lambda: old_rid in server.aborted_rids)
        assert server.abort_log[0].rid == old_rid and server.abort_log[0].matched == [old_rid]
        assert (await collect(new))[-1].reason in ("budget", "end_of_middle")
        # job.cancel() does the same
        third = eng.submit(request("3", doc="file:///b.py", plan=Plan(max_tokens=200)))
        assert (await first_draft(third)).kind == "draft"
        third.cancel()
        assert (await collect(third))[-1].reason == "cancelled"
        rid3 = server.received_rids[-1]
        await server.wait_for(lambda: rid3 in server.aborted_rids)


class RejectedKey(SglangEngineClient):
    """Sends a sampling key the server does not know (as a newer client might)."""

    def _body(self, job: Any) -> Any:
        body, prompt, tail = super()._body(job)
        body["sampling_params"]["threshold"] = 0.9
        return body, prompt, tail


async def test_http_400_and_streamed_errors_become_error_events(tok: Path) -> None:
    server = fake(tok)
    url = await server.start()
    eng = client(tok, {"speedy": [url]})
    bad = RejectedKey(eng.cfg)
    await started(eng)
    await started(bad)
    try:
        ev = (await collect(bad.submit(request())))[-1]
        assert ev.kind == "error" and "HTTP 400" in (ev.error or "") and "unknown field `threshold`" in (ev.error or "")
        ev = (await collect(eng.submit(request(plan=Plan(max_tokens=-1)))))[-1]  # refused inside the stream
        assert ev.kind == "error" and "max_new_tokens must be at least 0" in (ev.error or "")
        assert eng.state == "ready" and bad.state == "ready"  # a refusal is no lost server
        assert (await collect(eng.submit(request())))[-1].reason == "end_of_middle"
    finally:
        await eng.close()
        await bad.close()
        await server.stop()


async def test_start_waits_out_503_while_the_server_loads(tok: Path) -> None:
    server = fake(tok, start_delay_s=0.6)
    url = await server.start()
    eng = client(tok, {"speedy": [url]})
    msgs: list[str] = []
    try:
        await asyncio.wait_for(eng.start(progress(msgs)), 20)
        assert eng.state == "ready" and any("HTTP 503" in m for m in msgs)
    finally:
        await eng.close()
        await server.stop()


async def test_wrong_family_is_refused_naming_both(tok: Path) -> None:
    server = fake(tok, model_path="Qwen/Qwen2.5-Coder-7B", architectures=("Qwen2ForCausalLM",))
    url = await server.start()
    eng = client(tok, {"speedy": [url]})
    try:
        await eng.start(lambda m, p: None)
        assert eng.state == "error"
        assert "Qwen/Qwen2.5-Coder-7B" in (eng.error or "") and str(tok) in (eng.error or "")
        ev = (await collect(eng.submit(request())))[-1]
        assert ev.kind == "error" and server.requests_received == 0
    finally:
        await eng.close()
        await server.stop()
    # a LLaDA2 server with this project's own tokenizer (another family) is refused too
    server = fake(tok)
    url = await server.start()
    eng = client(CHECKPOINTS_DIR / "tiny-code", {"speedy": [url]})
    try:
        await eng.start(lambda m, p: None)
        assert eng.state == "error" and "LLaDA2.0-mini" in (eng.error or "") and "tiny-code" in (eng.error or "")
    finally:
        await eng.close()
        await server.stop()


async def test_lost_server_reported_once_then_recovered_on_the_same_port(tok: Path) -> None:
    async with serving(tok, block_delay_ms=20.0, reply=REPLY * 4) as (server, eng):
        url = eng.cfg.urls["speedy"][0]
        states: list[tuple[str, str]] = []
        back = asyncio.Event()

        def heard(state: str, msg: str) -> None:
            states.append((state, msg))
            if state == "ready":
                back.set()

        eng.on_state = heard
        job = eng.submit(request(plan=Plan(max_tokens=200)))
        assert (await first_draft(job)).kind == "draft"
        await server.stop()  # killed mid-stream
        ev = (await collect(job))[-1]
        assert ev.kind == "error" and url in (ev.error or "")
        for i in range(3):  # meanwhile: clear errors at once, no new report
            ev = (await collect(eng.submit(request(str(10 + i)), ), timeout=2))[-1]
            assert ev.kind == "error" and "no SGLang server" in (ev.error or "")
        assert [s for s, _ in states] == ["error"] and url in states[0][1]
        await server.start()  # the same port
        await asyncio.wait_for(back.wait(), 10)
        assert [s for s, _ in states] == ["error", "ready"]
        assert (await collect(eng.submit(request("20", plan=Plan(max_tokens=16)))))[-1].kind == "done"


async def test_least_outstanding_balances_two_servers(tok: Path) -> None:
    a, b = fake(tok, block_delay_ms=30.0), fake(tok, block_delay_ms=30.0)
    ua, ub = await a.start(), await b.start()
    eng = await started(client(tok, {"speedy": [ua, ub]}))
    try:
        jobs = [eng.submit(request(str(i), doc=f"file:///{i}.py")) for i in range(6)]
        for j in jobs:
            assert (await collect(j))[-1].kind == "done"
        assert a.requests_received == 3 and b.requests_received == 3
        assert max(a.running_peak, b.running_peak) == 3
    finally:
        await eng.close()
        await a.stop()
        await b.stop()


async def test_router_forwards_and_aborts_fan_out_to_its_workers(tok: Path) -> None:
    a, b = fake(tok, block_delay_ms=30.0, reply=REPLY * 4), fake(tok, block_delay_ms=30.0, reply=REPLY * 4)
    ua, ub = await a.start(), await b.start()
    router = FakeRouter([ua, ub])
    ur = await router.start()
    eng = await started(client(tok, router=ur))
    try:
        assert eng.pool is not None and eng.info["servers"][0]["workers"] == 2  # a count: their URLs are internal
        assert eng.pool.servers[0].workers == [ua, ub]
        job = eng.submit(request(plan=Plan(max_tokens=200)))
        assert (await first_draft(job)).kind == "draft"
        job.cancel()
        assert (await collect(job))[-1].reason == "cancelled"
        worker = a if a.received_rids else b
        rid = worker.received_rids[0]
        await worker.wait_for(lambda: rid in worker.aborted_rids)
        for w in (a, b):  # the abort went to every worker; the router was never asked
            await w.wait_for(partial(aborted_at, w, rid))
        assert "/abort_request" not in router.refused and router.forwarded[0][1] == "/generate"
    finally:
        await eng.close()
        await router.stop()
        await a.stop()
        await b.stop()
