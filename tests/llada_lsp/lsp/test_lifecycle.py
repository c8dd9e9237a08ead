"""The LSP lifecycle over stdio: the real server process, raw frames (`Lifecycle` in llada_lsp/lsp/stdio.py).

Each test starts its own server (nothing loads: the engine is pointed at a closed port).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from tests.fakes.raw_lsp import INIT, Raw, initialized, msg, notification, request, spawn, stop

pytestmark = pytest.mark.asyncio(loop_scope="module")

OPEN = notification("textDocument/didOpen", {"textDocument": {
    "uri": "file:///l.py", "languageId": "python", "version": 1, "text": "x = 1\n"}})


@pytest_asyncio.fixture(loop_scope="module")
async def fresh() -> AsyncIterator[Raw]:
    r = await spawn()
    yield r
    await stop(r)


@pytest_asyncio.fixture(loop_scope="module")
async def running() -> AsyncIterator[Raw]:
    r = await initialized()
    yield r
    await stop(r)


async def test_requests_before_initialize_are_server_not_initialized(fresh: Raw) -> None:
    await fresh.write(msg(request(2, "llada/debugInfo", {})))
    a = await fresh.answer(2)
    assert a["error"]["code"] == -32002 and "before initialize" in a["error"]["message"], a
    await fresh.write(msg(request(3, "textDocument/completion", {
        "textDocument": {"uri": "file:///l.py"}, "position": {"line": 0, "character": 0}})))
    assert (await fresh.answer(3))["error"]["code"] == -32002
    await fresh.write(msg(OPEN))  # a notification before initialize is dropped
    await fresh.write(msg(request(4, "initialize", INIT)))
    assert "capabilities" in (await fresh.answer(4))["result"]
    await fresh.write(msg(request(5, "llada/debugInfo", {})))
    assert (await fresh.answer(5))["result"]["documents"] == 0


async def test_initialize_after_an_early_shutdown_initializes(fresh: Raw) -> None:
    await fresh.write(msg(request(2, "shutdown")))
    assert (await fresh.answer(2))["error"]["code"] == -32002
    await fresh.write(msg(request(3, "initialize", INIT)))
    assert "capabilities" in (await fresh.answer(3))["result"]
    await fresh.write(msg(request(4, "llada/debugInfo", {})))
    assert "options" in (await fresh.answer(4))["result"]


async def test_a_second_initialize_is_an_invalid_request(running: Raw) -> None:
    await running.write(msg(request(2, "initialize", INIT)))
    a = await running.answer(2)
    assert a["error"]["code"] == -32600 and "already" in a["error"]["message"], a
    assert await running.send_then_probe(b"") == []  # still serving


async def test_a_custom_request_without_params_is_answered(running: Raw) -> None:
    await running.write(msg(request(2, "llada/debugInfo")))
    assert "options" in (await running.answer(2))["result"]
    await running.write(msg({**request(3, "llada/debugInfo"), "params": None}))
    assert "options" in (await running.answer(3))["result"]
    await running.write(msg(request(4, "textDocument/completion")))  # LSP params required
    a = await running.answer(4)
    assert a["error"]["code"] == -32602 and "params" in a["error"]["message"], a


async def test_after_shutdown_requests_are_invalid_and_exit_ends_cleanly(running: Raw) -> None:
    await running.write(msg(OPEN))
    await running.write(msg(request(2, "shutdown")))
    assert (await running.answer(2)) == {"jsonrpc": "2.0", "id": 2, "result": None}
    for i, method in enumerate(["llada/debugInfo", "shutdown", "initialize"], start=3):
        await running.write(msg(request(i, method, INIT if method == "initialize" else {})))
        a = await running.answer(i)
        assert a["error"]["code"] == -32600 and "after shutdown" in a["error"]["message"], a
    await running.write(msg(OPEN))  # dropped, not an error
    await running.write(msg(notification("exit")))
    assert await asyncio.wait_for(running.proc.wait(), 30) == 0


async def test_exit_without_shutdown_ends_with_status_1(running: Raw) -> None:
    await running.write(msg(notification("exit")))
    assert await asyncio.wait_for(running.proc.wait(), 30) == 1


@pytest.mark.parametrize("method", ["textDocument/didOpen", "initialized", "$/cancelRequest",
                                    "textDocument/didShowCompletion", "exit"])
async def test_a_notification_sent_with_an_id_is_method_not_found(running: Raw, method: str) -> None:
    """JSON-RPC: a message with an id is a request; a method the server knows only as a
    notification is not available as one (-32601), and the message is not handled."""
    params = OPEN["params"] if method == "textDocument/didOpen" else {"id": 1} if method == "$/cancelRequest" else {}
    await running.write(msg(request(7, method, params)))
    a = await running.answer(7)
    assert a["error"]["code"] == -32601 and f"{method} is a notification" in a["error"]["message"], a
    await running.write(msg(request(8, "llada/debugInfo", {})))
    assert (await running.answer(8))["result"]["documents"] == 0  # the didOpen was not handled
