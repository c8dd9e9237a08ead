"""The fake SGLang server (tests.fakes.sglang) behaves as sglang 0.5.23 does, over real HTTP.

Each test talks to it with the raw client below (asyncio streams; chunked SSE parsed here).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.fakes.sglang import FakeRouter, FakeSglang

BLOCK = 8


async def call(url: str, method: str, path: str, payload: Any = None) -> tuple[int, dict[str, str], asyncio.StreamReader, asyncio.StreamWriter]:
    u = urlsplit(url)
    reader, writer = await asyncio.open_connection(u.hostname, u.port)
    body = b"" if payload is None else json.dumps(payload).encode()
    writer.write(f"{method} {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\ncontent-length: {len(body)}\r\n\r\n".encode() + body)
    await writer.drain()
    status = int((await reader.readline()).split()[1])
    headers: dict[str, str] = {}
    while (line := await reader.readline()) not in (b"\r\n", b""):
        k, _, v = line.decode().partition(":")
        headers[k.strip().lower()] = v.strip()
    return status, headers, reader, writer


async def get_json(url: str, method: str, path: str, payload: Any = None) -> tuple[int, Any]:
    status, headers, reader, writer = await call(url, method, path, payload)
    n = int(headers.get("content-length", "0"))
    raw = await reader.readexactly(n) if n else b""
    writer.close()
    return status, json.loads(raw) if raw else None


async def events(reader: asyncio.StreamReader) -> AsyncIterator[str]:
    """SSE `data:` payloads out of a chunked body."""
    buf = b""
    while True:
        size = int((await reader.readline()).strip(), 16)
        if size == 0:
            return
        buf += await reader.readexactly(size)
        await reader.readexactly(2)
        while b"\n\n" in buf:
            ev, buf = buf.split(b"\n\n", 1)
            assert ev.startswith(b"data: ")
            yield ev[6:].decode()


async def stream(url: str, payload: dict[str, Any]) -> list[Any]:
    status, headers, reader, writer = await call(url, "POST", "/generate", {**payload, "stream": True})
    assert status == 200 and headers["transfer-encoding"] == "chunked"
    out = [e if e == "[DONE]" else json.loads(e) async for e in events(reader)]
    writer.close()
    return out


@pytest.fixture
async def fake() -> AsyncIterator[FakeSglang]:
    f = FakeSglang(reply="abcdefghijklmnopqrstuvwxyz", block_size=BLOCK, block_delay_ms=5)
    await f.start()
    yield f
    await f.stop()


def url_of(f: FakeSglang) -> str:
    return f"http://127.0.0.1:{f.port}"


async def test_health_is_503_while_starting_then_200() -> None:
    f = FakeSglang(ready=False)
    url = await f.start()
    try:
        assert (await get_json(url, "GET", "/health"))[0] == 503
        assert (await get_json(url, "GET", "/health_generate"))[0] == 503
        assert (await get_json(url, "GET", "/ready"))[0] == 503
        f.ready = True
        assert (await get_json(url, "GET", "/ready"))[0] == 200
        status, info = await get_json(url, "GET", "/model_info")
        assert status == 200 and info["architectures"] == ["LLaDA2MoeModelLM"]
        status, info = await get_json(url, "GET", "/get_model_info")
        assert status == 200 and info["model_path"] == "inclusionAI/LLaDA2.0-mini" and info["is_generation"]
        status, sinfo = await get_json(url, "GET", "/get_server_info")
        assert sinfo["max_running_requests"] == 1 and sinfo["dllm_fdfo"] is True
    finally:
        await f.stop()


async def test_unknown_sampling_key_is_400_with_the_contract_text(fake: FakeSglang) -> None:
    status, body = await get_json(url_of(fake), "POST", "/generate",
                                  {"input_ids": [1, 2], "sampling_params": {"max_tokens": 4}})
    assert status == 400
    assert body["error"].startswith("unknown field `max_tokens`, expected one of `max_new_tokens`")
    assert fake.requests_received == 0
    status, body = await get_json(url_of(fake), "POST", "/generate", {"sampling_params": {}})
    assert status == 400 and body == {"error": {"message": "Either text, input_ids or input_embeds should be provided."}}


async def test_cumulative_stream_commits_absolute_blocks(fake: FakeSglang) -> None:
    evs = await stream(url_of(fake), {"rid": "r1", "input_ids": [5, 6, 7], "sampling_params": {"max_new_tokens": 64}})
    assert evs[-1] == "[DONE]"
    lens = [len(e["output_ids"]) for e in evs[:-1]]
    # prompt 3 -> first block 8 - 3 = 5 tokens, then 8 a round, the 26-token reply ends it
    assert lens == [5, 13, 21, 26]
    assert evs[-2]["text"] == "abcdefghijklmnopqrstuvwxyz"
    assert evs[0]["text"] == "abcde" and evs[0]["meta_info"]["finish_reason"] is None
    assert evs[-2]["meta_info"]["prompt_tokens"] == 3 and evs[-2]["meta_info"]["completion_tokens"] == 26


async def test_incremental_stream_sends_deltas() -> None:
    f = FakeSglang(reply="abcdefghijkl", block_size=BLOCK, block_delay_ms=5, incremental_streaming_output=True)
    url = await f.start()
    try:
        evs = await stream(url, {"input_ids": [1] * 10, "sampling_params": {"max_new_tokens": 5}})
    finally:
        await f.stop()
    texts = [e["text"] for e in evs[:-1]]
    # prompt 10 -> prefill round (one block of prompt; empty FDFO chunk), then 6 tokens, cut at 5
    assert texts == ["", "abcde"]
    assert evs[-2]["meta_info"]["finish_reason"] == {"type": "length", "length": 5}


async def test_fdfo_unresolved_rounds_stream_empty_deltas() -> None:
    f = FakeSglang(reply="abcdefghijklmnop", block_size=BLOCK, block_delay_ms=5,
                   stall=lambda rid, n: n == 2)
    url = await f.start()
    try:
        evs = await stream(url, {"input_ids": [1, 2, 3, 4], "sampling_params": {}})
    finally:
        await f.stop()
    lens = [len(e["output_ids"]) for e in evs[:-1]]
    assert lens == [4, 4, 12, 16]  # round 2 left the block unresolved: same cumulative output


async def test_stop_string_inside_a_block_cuts_the_output(fake: FakeSglang) -> None:
    evs = await stream(url_of(fake), {"input_ids": [1], "sampling_params": {"stop": ["jk"]}})
    last = evs[-2]
    assert last["meta_info"]["finish_reason"] == {"type": "stop", "matched": "jk"}
    assert last["text"] == "abcdefghi"
    assert len(last["output_ids"]) == 11  # through the token that completed the stop
    assert all("jk" not in e["text"] for e in evs[:-1])


async def test_abort_by_exact_rid_ends_the_stream_within_a_round_and_matches_by_prefix() -> None:
    f = FakeSglang(reply="x" * 400, block_size=BLOCK, block_delay_ms=20, max_running_requests=4)
    url = await f.start()
    try:
        t1 = asyncio.create_task(stream(url, {"rid": "job-1", "input_ids": [1], "sampling_params": {"max_new_tokens": 400}}))
        t10 = asyncio.create_task(stream(url, {"rid": "job-10", "input_ids": [1], "sampling_params": {"max_new_tokens": 400}}))
        t2 = asyncio.create_task(stream(url, {"rid": "other", "input_ids": [1], "sampling_params": {"max_new_tokens": 40}}))
        await f.wait_for(lambda: f.rounds >= 2)
        assert (await get_json(url, "POST", "/abort_request", {"rid": "job"}))[0] == 200
        assert f.abort_log[-1].matched == []  # a bare prefix is not a live rid: dropped
        rounds_at_abort = f.rounds
        await get_json(url, "POST", "/abort_request", {"rid": "job-1"})
        ev1, ev10, ev2 = await asyncio.wait_for(asyncio.gather(t1, t10, t2), 5)
    finally:
        await f.stop()
    assert f.abort_log[-1].matched == ["job-1", "job-10"]
    for evs in (ev1, ev10):
        assert evs[-1] == "[DONE]"
        assert evs[-2]["meta_info"]["finish_reason"]["type"] == "abort"
    assert ev2[-2]["meta_info"]["finish_reason"]["type"] == "length"
    assert sorted(f.aborted_rids) == ["job-1", "job-10"]
    assert f.timings["job-1"].finished is not None
    assert len(ev1[-2]["output_ids"]) <= (rounds_at_abort + 1) * BLOCK


async def test_max_running_requests_queues_the_rest() -> None:
    f = FakeSglang(reply="y" * 20, block_size=BLOCK, block_delay_ms=5)  # dLLM default: 1 row
    url = await f.start()
    try:
        reqs = [stream(url, {"rid": f"q{i}", "input_ids": [1], "sampling_params": {}}) for i in range(3)]
        results = await asyncio.wait_for(asyncio.gather(*reqs), 5)
    finally:
        await f.stop()
    assert f.running_peak == 1
    assert all(r[-2]["meta_info"]["finish_reason"]["type"] == "length" for r in results)
    t = [f.timings[f"q{i}"] for i in range(3)]
    assert t[0].finished is not None and t[1].admitted is not None and t[2].admitted is not None
    assert t[0].finished <= t[1].admitted and t[1].finished <= t[2].admitted


async def test_queued_request_aborts_at_once() -> None:
    f = FakeSglang(reply="z" * 200, block_size=BLOCK, block_delay_ms=10)
    url = await f.start()
    try:
        first = asyncio.create_task(stream(url, {"rid": "run", "input_ids": [1], "sampling_params": {}}))
        queued = asyncio.create_task(stream(url, {"rid": "wait", "input_ids": [1], "sampling_params": {}}))
        await f.wait_for(lambda: f.requests_received == 2 and f.rounds >= 1)
        await get_json(url, "POST", "/abort_request", {"rid": "wait"})
        evs = await asyncio.wait_for(queued, 2)
        assert not first.done()
        assert evs[-2]["meta_info"]["finish_reason"] == {"type": "abort", "message": "Abort in waiting queue"}
        assert evs[-2]["output_ids"] == []
        await get_json(url, "POST", "/abort_request", {"abort_all": True})
        await asyncio.wait_for(first, 2)
    finally:
        await f.stop()


async def test_router_forwards_generate_round_robin_but_not_abort() -> None:
    a = FakeSglang(reply="aaaa", block_delay_ms=2)
    b = FakeSglang(reply="bbbb", block_delay_ms=2)
    ua, ub = await a.start(), await b.start()
    router = FakeRouter([ua, ub])
    ur = await router.start()
    try:
        status, workers = await get_json(ur, "GET", "/workers")
        assert status == 200 and [w["url"] for w in workers["workers"]] == [ua, ub]
        first = await stream(ur, {"input_ids": [1], "sampling_params": {}})
        status, second = await get_json(ur, "POST", "/generate", {"input_ids": [1], "sampling_params": {}})
        assert first[-2]["text"] == "aaaa" and second["text"] == "bbbb"
        status, _ = await get_json(ur, "POST", "/abort_request", {"rid": "anything"})
        assert status == 404 and router.refused == ["/abort_request"]
        assert a.abort_log == [] and b.abort_log == []
    finally:
        await router.stop()
        await a.stop()
        await b.stop()


async def test_client_disconnect_aborts_after_the_delay() -> None:
    f = FakeSglang(reply="w" * 400, block_size=BLOCK, block_delay_ms=10, disconnect_abort_s=0.2)
    url = await f.start()
    try:
        status, _, reader, writer = await call(url, "POST", "/generate",
                                               {"rid": "gone", "input_ids": [1], "stream": True, "sampling_params": {"max_new_tokens": 400}})
        assert status == 200
        await reader.readline()  # the first chunk's size line: the stream is running
        writer.close()
        closed_at = asyncio.get_running_loop().time()
        await f.wait_for(lambda: "gone" in f.aborted_rids, timeout=3)
        assert asyncio.get_running_loop().time() - closed_at >= 0.2
        assert f.abort_log[-1].rid == "gone"
    finally:
        await f.stop()


async def test_a_loading_server_refuses_connections_then_warms_up_with_503() -> None:
    f = FakeSglang(load_s=60.0, ready=False)
    url = await f.start()
    try:
        with pytest.raises(ConnectionRefusedError):
            await get_json(url, "GET", "/ready")
        f.finish_loading()
        await f.wait_for(lambda: f.listening, timeout=3)
        assert (await get_json(url, "GET", "/ready"))[0] == 503  # listening, warming up
        assert (await get_json(url, "GET", "/health"))[0] == 503
        f.ready = True
        assert (await get_json(url, "GET", "/ready"))[0] == 200
    finally:
        await f.stop()


async def test_health_queues_a_generation_and_answers_after_its_poll() -> None:
    f = FakeSglang(reply="abc", block_size=BLOCK, block_delay_ms=5, health_poll_s=0.2)
    url = await f.start()
    try:
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        assert (await get_json(url, "GET", "/health"))[0] == 200
        assert loop.time() - t0 >= 0.2 and f.health_rows == 1 and f.rounds >= 1  # it ran a round
        # with the only running slot taken by a long request, /health waits its poll, then sees its output
        long = asyncio.create_task(stream(url, {"rid": "long", "input_ids": [1], "sampling_params": {"max_new_tokens": 64}}))
        f.reply = "x" * 64
        await f.wait_for(lambda: f.rounds >= 2)
        assert (await get_json(url, "GET", "/health"))[0] == 200
        await asyncio.wait_for(long, 5)
    finally:
        await f.stop()


async def test_one_abort_per_rid_and_an_early_abort_misses_the_request() -> None:
    f = FakeSglang(reply="v" * 40, block_size=BLOCK, block_delay_ms=5, dispatch_delay_s=0.3)
    url = await f.start()
    try:
        t = asyncio.create_task(stream(url, {"rid": "early", "input_ids": [1], "sampling_params": {"max_new_tokens": 40}}))
        await f.wait_for(lambda: "early" in f.received_rids)
        await get_json(url, "POST", "/abort_request", {"rid": "early"})  # registered, not yet dispatched
        await get_json(url, "POST", "/abort_request", {"rid": "early"})
        evs = await asyncio.wait_for(t, 5)
        assert [r.matched for r in f.abort_log] == [[], []]
        assert f.abort_log[1].dropped == "abort already sent"
        assert evs[-2]["meta_info"]["finish_reason"]["type"] == "length"  # it ran to max_new_tokens
    finally:
        await f.stop()


async def test_a_running_row_ends_at_once_on_abort() -> None:
    f = FakeSglang(reply="r" * 400, block_size=BLOCK, block_delay_ms=200)
    url = await f.start()
    try:
        t = asyncio.create_task(stream(url, {"rid": "run", "input_ids": [1], "sampling_params": {"max_new_tokens": 400}}))
        await f.wait_for(lambda: f.rounds >= 1)
        rounds = f.rounds
        await get_json(url, "POST", "/abort_request", {"rid": "run"})
        evs = await asyncio.wait_for(t, 5)
        assert f.rounds == rounds  # no further forward was needed
        assert evs[-2]["meta_info"]["finish_reason"]["type"] == "abort" and f.aborted_rids == ["run"]
    finally:
        await f.stop()


async def test_prefill_is_one_block_a_round_and_pauses_decoding() -> None:
    f = FakeSglang(reply="p" * 40, block_size=BLOCK, block_delay_ms=5, max_running_requests=2)
    url = await f.start()
    try:
        first = asyncio.create_task(stream(url, {"rid": "a", "input_ids": [1], "sampling_params": {"max_new_tokens": 40}}))
        await f.wait_for(lambda: f.rounds >= 1)
        second = asyncio.create_task(stream(url, {"rid": "b", "input_ids": [1] * (4 * BLOCK + 1),
                                                  "sampling_params": {"max_new_tokens": 8}}))
        ev_a, ev_b = await asyncio.wait_for(asyncio.gather(first, second), 5)
    finally:
        await f.stop()
    empty_b = [e for e in ev_b[:-1] if not e["output_ids"]]
    assert len(empty_b) == 4  # four prompt blocks, four prefill rounds (empty FDFO chunks)
    # while b prefilled, a committed nothing: a's chunk count is its own rounds only
    t_a, t_b = f.timings["a"], f.timings["b"]
    assert t_a.finished is not None and t_b.admitted is not None
    assert f.rounds >= len(ev_a[:-1]) + 4


async def test_keep_alive_serves_requests_one_after_another_on_one_connection() -> None:
    f = FakeSglang(reply="k" * 10, block_size=BLOCK, block_delay_ms=2)
    url = await f.start()
    u = urlsplit(url)
    reader, writer = await asyncio.open_connection(u.hostname, u.port)
    try:
        for i in range(3):
            body = json.dumps({"rid": f"ka{i}", "input_ids": [1], "stream": True, "sampling_params": {}}).encode()
            writer.write(f"POST /generate HTTP/1.1\r\nhost: x\r\ncontent-length: {len(body)}\r\n\r\n".encode() + body)
            assert (await reader.readline()).split()[1] == b"200"
            while await reader.readline() not in (b"\r\n", b""):
                pass
            evs = [e async for e in events(reader)]
            assert evs[-1] == "[DONE]" and await reader.readline() == b"\r\n"  # the chunked body's end
            # the next request at once, while the server still winds this one down
        assert f.received_rids == ["ka0", "ka1", "ka2"]
    finally:
        writer.close()
        await f.stop()
