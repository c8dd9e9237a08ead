"""The real language server over stdio with `engine = "sglang"` against the FAKE SGLang server
(tests.fakes.sglang, loopback, no model, in this test's event loop): a typing storm whose
superseded requests are aborted on the server, a server killed and restarted mid-session
(one clear error, then completions resume), and the status carrying the backend's
capabilities with no `llada/refine` ever sent."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path

import pytest
import pytest_asyncio
from lsprotocol import types as t

from llada_lsp.client import LladaClient, debug_info, first_text, insert, open_document, send_inline
from tests.fakes.checkpoint import END_OF_MIDDLE, llada2_dir
from tests.fakes.sglang import FakeSglang

pytestmark = [pytest.mark.asyncio(loop_scope="function")]
ROOT = Path(__file__).resolve().parents[3]
URI = "file:///work/storm.py"
TEXT = "def add(a, b):\n    total = "
REPLY = "a + b\n    return total\n"
WATCHDOG_S = 120  # waits for what must come: a hang guard, generous for a machine shared 2x or more


@pytest_asyncio.fixture
async def fake(tmp_path: Path) -> AsyncIterator[FakeSglang]:
    tok = llada2_dir(tmp_path / "llada2")
    server = FakeSglang(reply=REPLY, tokenizer=tok, end_token_id=END_OF_MIDDLE, block_size=8,
                        block_delay_ms=20.0, max_running_requests=8)
    await server.start()
    yield server
    await server.stop()


@pytest_asyncio.fixture
async def lsp(fake: FakeSglang, tmp_path: Path) -> AsyncIterator[LladaClient]:
    client = LladaClient()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    init = {"engine": "sglang", "model": str(tmp_path / "llada2"),
            "sglang": {"urls": {"speedy": [f"http://127.0.0.1:{fake.port}"]}},
            "speculative": False, "rescueAlternatives": 0, "maxTokens": {"line": 16, "statements": 16, "block": 16}}
    await client.start(init, env=env, timeout=60)
    yield client
    await client.close()


def received_more_than(fake: FakeSglang, n: int) -> bool:
    return fake.requests_received > n


def at_end(text: str) -> t.Position:
    lines = text.split("\n")
    return t.Position(len(lines) - 1, len(lines[-1]))


def type_char(lsp: LladaClient, version: int, text: str, ch: str) -> str:
    """A keystroke at the end of `text` (didChange); the new text."""
    end = at_end(text)
    insert(lsp, URI, version, end.line, end.character, ch)
    return text + ch


async def test_typing_storm_aborts_superseded_requests_and_the_last_answers(fake: FakeSglang, lsp: LladaClient) -> None:
    status = lsp.statuses[-1]
    caps = status["engine"]
    assert status["state"] == "ready" and caps["backend"] == "sglang" and caps["granularity"] == "block"
    assert caps["edits"] is False and caps["remask"] is False and caps["alternatives"] == 1
    assert caps["next_edit"] is False and caps["presets"] == ["speedy"]
    open_document(lsp, URI, "python", TEXT)
    text, version = TEXT, 1
    pending = []
    for i, ch in enumerate("xyzw" + "qrstuv"):
        version += 1
        text = type_char(lsp, version, text, ch)
        pending.append(send_inline(lsp, URI, at_end(text)))
        if i < 4:  # these reach the server before the next keystroke; the rest is a burst
            await fake.wait_for(partial(received_more_than, fake, i), timeout=WATCHDOG_S)
    answers = await asyncio.wait_for(asyncio.gather(*pending), WATCHDOG_S)
    assert first_text(answers[-1]) == "a + b"
    assert all(first_text(a) == "" for a in answers[:-1])
    received = list(fake.received_rids)
    last = received[-1]
    await fake.wait_for(lambda: len({r.rid for r in fake.abort_log}) >= 4, timeout=WATCHDOG_S)
    aborted = {r.rid for r in fake.abort_log}
    assert last not in aborted and aborted <= set(received[:-1])
    assert set(received[:4]) <= aborted  # every request that reached the server in time was aborted
    info = await debug_info(lsp)
    assert info["engine"]["aborts_sent"] >= 4
    assert lsp.refines == [] and info["counters"].get("refines", 0) == 0
    await lsp.until(lambda: lsp.stats, WATCHDOG_S)  # llada/stats still arrive


async def test_server_killed_and_restarted_mid_session(fake: FakeSglang, lsp: LladaClient) -> None:
    open_document(lsp, URI, "python", TEXT)
    assert first_text(await send_inline(lsp, URI, at_end(TEXT))) == "a + b"
    before = len(lsp.statuses)
    await fake.stop()  # killed
    version, text = 1, TEXT
    for ch in "xyz":  # keep typing (not what was shown): empty answers, never a hang
        version += 1
        text = type_char(lsp, version, text, ch)
        assert first_text(await asyncio.wait_for(send_inline(lsp, URI, at_end(text)), WATCHDOG_S)) == ""
    errors = [s for s in lsp.statuses[before:] if s["state"] == "error"]
    assert len(errors) == 1 and f"127.0.0.1:{fake.port}" in errors[0]["message"]  # reported once
    await fake.start()  # restarted on the same port
    await lsp.until(lambda: any(s["state"] == "ready" for s in lsp.statuses[before:]), WATCHDOG_S)
    assert [s["state"] for s in lsp.statuses[before:]] == ["error", "ready"]
    version += 1
    text = type_char(lsp, version, text, " + ")  # `total = xyz + a + b`: a suggestion that parses
    assert first_text(await asyncio.wait_for(send_inline(lsp, URI, at_end(text)), WATCHDOG_S)) == "a + b"
    assert lsp.refines == []


async def test_a_server_still_loading_its_model_shows_loading_then_ready_and_no_error(tmp_path: Path) -> None:
    """SGLang listens only once its model is loaded (connections are refused until then),
    then answers 503 while it warms up: the editor sees "loading", then "ready", no error."""
    tok = llada2_dir(tmp_path / "llada2")
    server = FakeSglang(reply=REPLY, tokenizer=tok, end_token_id=END_OF_MIDDLE, block_size=8,
                        block_delay_ms=20.0, load_s=120.0, start_delay_s=0.5)
    await server.start()
    client = LladaClient()
    shown: list[str] = []
    client.feature("window/showMessage")(lambda _ls, params: shown.append(str(params)))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    init = {"engine": "sglang", "model": str(tok), "sglang": {"urls": {"speedy": [f"http://127.0.0.1:{server.port}"]}},
            "speculative": False, "rescueAlternatives": 0, "maxTokens": {"line": 16, "statements": 16, "block": 16}}
    try:
        assert not server.listening
        starting = asyncio.create_task(client.start(init, env=env, timeout=60))  # raises on an error first
        await client.until(lambda: any("not listening yet" in str(s.get("message", "")) for s in client.statuses), 60)
        server.finish_loading()  # the model is loaded: it listens (503 while it warms up), then is ready
        await starting
        states = [s["state"] for s in client.statuses]
        assert "error" not in states and states[0] == "loading" and states[-1] == "ready", states
        assert server.listening and server.ready
        open_document(client, URI, "python", TEXT)
        assert first_text(await asyncio.wait_for(send_inline(client, URI, at_end(TEXT)), WATCHDOG_S)) == "a + b"
        assert shown == []  # no error was shown to the user
    finally:
        await client.close()
        await server.stop()
