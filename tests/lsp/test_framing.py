"""Malformed JSON-RPC over stdio: the real server process, raw frames written to its stdin.

Each bad message must get the JSON-RPC error a client can act on (a request with bad params
used to get no answer at all: the client waited forever), and the server must go on
answering: after each one a `llada/debugInfo` probe must be answered.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from lsp_helpers import ROOT

pytestmark = pytest.mark.asyncio(loop_scope="module")


def frame(body: bytes, length: int | None = None) -> bytes:
    return b"Content-Length: %d\r\n\r\n" % (len(body) if length is None else length) + body


def msg(obj: Any) -> bytes:
    return frame(json.dumps(obj).encode())


class Raw:
    """The server's stdin and a reader of its framed output."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        assert proc.stdin is not None and proc.stdout is not None
        self.stdin, self.stdout = proc.stdin, proc.stdout
        self.probes = 1000

    async def read(self) -> dict[str, Any]:
        length = None
        while True:
            line = await self.stdout.readline()
            assert line, "the server closed its output"
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":")[1])
            elif not line.strip() and length is not None:
                return json.loads(await self.stdout.readexactly(length))

    async def send_then_probe(self, data: bytes) -> list[dict[str, Any]]:
        """Write `data`, then a debugInfo request; the responses that came before its answer."""
        self.probes += 1
        probe = self.probes
        self.stdin.write(data + msg({"jsonrpc": "2.0", "id": probe, "method": "llada/debugInfo", "params": {}}))
        await self.stdin.drain()
        before = []
        while True:
            m = await asyncio.wait_for(self.read(), 30)
            if m.get("id") == probe and "method" not in m:
                assert "result" in m and "options" in m["result"], m
                return before
            if "method" not in m:  # server-to-client requests/notifications are not answers
                before.append(m)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def raw() -> AsyncIterator[Raw]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "llada_lsp", stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL, env=env, cwd=ROOT)
    r = Raw(proc)
    r.stdin.write(msg({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"capabilities": {}}}))
    assert "capabilities" in (await asyncio.wait_for(r.read(), 60))["result"]
    yield r
    if proc.returncode is None:
        proc.kill()
        await proc.wait()


def only_error(answers: list[dict[str, Any]], code: int, msg_id: Any) -> str:
    assert len(answers) == 1, answers
    (a,) = answers
    assert a["jsonrpc"] == "2.0" and "id" in a and a["id"] == msg_id, a
    assert a["error"]["code"] == code, a
    return str(a["error"]["message"])


async def test_bodies_that_are_not_json_are_parse_errors(raw: Raw) -> None:
    assert "Parse error" in only_error(await raw.send_then_probe(frame(b'{"jsonrpc": "2.0", "id": 3, ')), -32700, None)
    only_error(await raw.send_then_probe(frame(b"\xff\xfe\x00garbage")), -32700, None)
    only_error(await raw.send_then_probe(frame(b"")), -32700, None)


async def test_messages_that_are_not_requests_are_invalid_requests(raw: Raw) -> None:
    only_error(await raw.send_then_probe(msg([{"jsonrpc": "2.0", "id": 4, "method": "shutdown"}])), -32600, None)
    only_error(await raw.send_then_probe(msg({"jsonrpc": "2.0", "id": 5, "method": None})), -32600, 5)
    only_error(await raw.send_then_probe(msg({"jsonrpc": "2.0", "id": 6, "method": 17})), -32600, 6)


async def test_a_request_with_bad_params_gets_invalid_params_naming_the_fields(raw: Raw) -> None:
    bad = {"jsonrpc": "2.0", "id": 7, "method": "textDocument/inlineCompletion",
           "params": {"textDocument": {"uri": "file:///a.py"}, "position": {"line": "x", "character": 0}}}
    why = only_error(await raw.send_then_probe(msg(bad)), -32602, 7)
    assert "$.params.context" in why and "$.params.position.line" in why, why
    negative = {"jsonrpc": "2.0", "id": "eight", "method": "textDocument/inlineCompletion",
                "params": {"textDocument": {"uri": "file:///a.py"}, "position": {"line": -1, "character": 0},
                           "context": {"triggerKind": 1}}}
    assert "Position.line" in only_error(await raw.send_then_probe(msg(negative)), -32602, "eight")
    unknown = {"jsonrpc": "2.0", "id": 9, "method": "no/such", "params": {}}
    only_error(await raw.send_then_probe(msg(unknown)), -32601, 9)


async def test_a_notification_with_bad_params_is_dropped_quietly(raw: Raw) -> None:
    bad = {"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": {"uri": 3}}}
    assert await raw.send_then_probe(msg(bad)) == []
    change = {"jsonrpc": "2.0", "method": "textDocument/didChange",
              "params": {"textDocument": {"uri": "file:///never-opened.py", "version": 2},
                         "contentChanges": [{"text": "x"}]}}
    assert await raw.send_then_probe(msg(change)) == []


async def test_bad_headers_and_an_oversize_length_resync_at_the_next_header(raw: Raw) -> None:
    assert await raw.send_then_probe(b"Content-Length: abc\r\n\r\n") == []
    assert await raw.send_then_probe(b"X-Nonsense: 1\r\n\r\n") == []
    why = only_error(await raw.send_then_probe(b"Content-Length: 999999999999\r\n\r\n"), -32600, None)
    assert "over the server's limit" in why
    # headers in another case and a Content-Type are accepted
    probe = {"jsonrpc": "2.0", "id": 10, "method": "llada/debugInfo", "params": {}}
    body = json.dumps(probe).encode()
    answers = await raw.send_then_probe(
        b"content-length: %d\r\nContent-Type: application/vscode-jsonrpc; charset=utf-8\r\n\r\n" % len(body) + body)
    assert [a["id"] for a in answers] == [10] and "result" in answers[0]


async def test_the_stream_ending_inside_a_message_ends_the_server_cleanly(raw: Raw) -> None:
    raw.stdin.write(b"Content-Length: 100\r\n\r\n{\"jsonrpc\"")
    await raw.stdin.drain()
    raw.stdin.close()
    assert await asyncio.wait_for(raw.proc.wait(), 30) == 0
