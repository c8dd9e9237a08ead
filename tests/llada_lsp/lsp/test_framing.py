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

from tests.llada_lsp.lsp_helpers import ROOT

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
    # a body cut short whose id comes first (as clients write it): the error names the id
    assert "Parse error" in only_error(await raw.send_then_probe(frame(b'{"jsonrpc": "2.0", "id": 3, ')), -32700, 3)
    only_error(await raw.send_then_probe(frame(b'{"jsonrpc": "2.0", "method": "x", "id": 3, ')), -32700, None)
    only_error(await raw.send_then_probe(frame(b"\xff\xfe\x00garbage")), -32700, None)
    only_error(await raw.send_then_probe(frame(b"")), -32700, None)


async def test_messages_that_are_not_requests_are_invalid_requests(raw: Raw) -> None:
    only_error(await raw.send_then_probe(msg([{"jsonrpc": "2.0", "id": 4, "method": "shutdown"}])), -32600, None)
    only_error(await raw.send_then_probe(msg({"jsonrpc": "2.0", "id": 5, "method": None})), -32600, 5)
    only_error(await raw.send_then_probe(msg({"jsonrpc": "2.0", "id": 6, "method": 17})), -32600, 6)
    for bad_id in (None, 1.5, True, [1], {"a": 1}):  # an error without an id came back for null
        only_error(await raw.send_then_probe(msg({"jsonrpc": "2.0", "id": bad_id, "method": "no/such"})),
                   -32600, None)


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


def probe_body(msg_id: int) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": msg_id, "method": "llada/debugInfo", "params": {}}).encode()


async def twenty_answered(raw: Raw, first: int) -> None:
    """20 valid requests written at once all get their answers."""
    await_ids = list(range(first, first + 20))
    raw.stdin.write(b"".join(frame(probe_body(i)) for i in await_ids))
    await raw.stdin.drain()
    got = []
    while len(got) < 20:
        m = await asyncio.wait_for(raw.read(), 30)
        if "method" not in m:
            got.append(m["id"])
    assert got == await_ids


async def test_a_body_nested_too_deeply_is_a_parse_error(raw: Raw) -> None:
    deep = b"[" * 1000 + b"]" * 1000  # 2 KB: json.loads raised RecursionError and the server died
    assert "nested too deeply" in only_error(await raw.send_then_probe(frame(deep)), -32700, None)
    obj = b'{"jsonrpc": "2.0", "id": 11, "method": "llada/debugInfo", "params": {"a": ' + \
        b"[" * 5000 + b"]" * 5000 + b"}}"
    only_error(await raw.send_then_probe(frame(obj)), -32700, 11)


async def test_a_content_length_too_large_loses_nothing(raw: Raw) -> None:
    """A body 5 bytes short of its Content-Length swallows the next header's start: it is
    read again, and both messages are answered."""
    data = frame(probe_body(20), len(probe_body(20)) + 5) + frame(probe_body(21))
    answers = await raw.send_then_probe(data)
    assert [a["id"] for a in answers] == [20, 21] and all("result" in a for a in answers)
    await twenty_answered(raw, 30)


async def test_a_content_length_too_small_loses_only_that_message(raw: Raw) -> None:
    """A body 10 bytes longer than its Content-Length: the message is a parse error (with
    its id), its tail junk (one error, id null), and the stream resyncs at the next header."""
    data = frame(probe_body(50), len(probe_body(50)) - 10) + frame(probe_body(51))
    answers = await raw.send_then_probe(data)
    assert [(a["id"], a.get("error", {}).get("code")) for a in answers] == \
        [(50, -32700), (None, -32700), (51, None)], answers
    assert "outside any message" in answers[1]["error"]["message"]
    await twenty_answered(raw, 60)


async def test_a_damaged_header_loses_only_its_message(raw: Raw) -> None:
    data = b"Content-Lenght: 80\r\n\r\n" + probe_body(80) + frame(probe_body(81))
    answers = await raw.send_then_probe(data)
    assert [(a["id"], a.get("error", {}).get("code")) for a in answers] == \
        [(80, -32700), (81, None)], answers
    await twenty_answered(raw, 90)


async def test_junk_after_a_header_voids_its_length(raw: Raw) -> None:
    """A header, then a junk line instead of the blank line: the length is void, so the
    blank lines after it do not start a body that would swallow the next request (found
    by the fuzz suite: the server then waited forever)."""
    answers = await raw.send_then_probe(b"Content-Length: 148\r\n{\"no\": \"blank line\"}\r\n" + b"\r\n" * 80)
    assert [(a["id"], a["error"]["code"]) for a in answers] == [(None, -32700)], answers


async def test_a_cancel_with_an_id_of_the_wrong_type(raw: Raw) -> None:
    cancel = {"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": {"x": 1}}}
    assert await raw.send_then_probe(msg(cancel)) == []  # a notification: dropped
    answers = await raw.send_then_probe(msg({**cancel, "id": 12}))  # a notification's method with an id
    assert "is a notification" in only_error(answers, -32601, 12)  # was an Internal Error


async def test_the_stream_ending_inside_a_message_ends_the_server_cleanly(raw: Raw) -> None:
    raw.stdin.write(b"Content-Length: 100\r\n\r\n{\"jsonrpc\"")
    await raw.stdin.drain()
    raw.stdin.close()
    assert await asyncio.wait_for(raw.proc.wait(), 30) == 0
