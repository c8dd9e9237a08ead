"""Daemon hardening (issue 31): bounded memory per connection, per-connection prompt caches,
browser origins refused, a token by default, lone surrogates, fair rows, private runtime files.

Limits are tested on a real `Daemon` object serving real websockets on loopback from a thread
(`serve_in_thread`, small limits); the defaults on a real `llada-engine serve` process."""

from __future__ import annotations

import asyncio
import gc
import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from engine.api import CompletionRequest, EngineEvent, Plan
from engine.daemon import runtime
from engine.decoding.jobs import Job, fair_share_victim
from engine.service import TextEngine
from llada_lsp.engines.ws_engine import WsConnection
from tests.engine.daemon.daemon_helpers import Daemon, Served, serve_in_thread, stop_served

PREFIX = "def fibonacci(n):\n    if n < 2:\n        return n\n    "
TOKEN = "s3cret-token"
BACKLOG = 64 * 1024


@pytest.fixture(scope="module")
def served(tiny_model_dir: Path) -> Iterator[Served]:
    engine = TextEngine(tiny_model_dir, max_prompt_tokens=256)
    s = serve_in_thread(engine, token=TOKEN, max_batch=2, hello_timeout_s=1.0, preauth_messages=3,
                        preauth_bytes=4096, max_backlog_bytes=BACKLOG, close_timeout_s=10.0,
                        max_message_bytes=65536, max_connections=8)
    yield s
    stop_served(s)


def bearer(token: str | None = TOKEN) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def recv_json(ws: ClientConnection, timeout: float = 20.0) -> dict:
    return json.loads(await asyncio.wait_for(ws.recv(), timeout))


async def close_code(ws: ClientConnection, timeout: float = 20.0) -> int | None:
    """Read until the daemon closes the connection; the close code it sent (None: none)."""
    with pytest.raises(ConnectionClosed) as exc:
        while True:
            await asyncio.wait_for(ws.recv(), timeout)
    return exc.value.rcvd.code if exc.value.rcvd is not None else None


async def until_done(ws: ClientConnection, rid: str) -> dict:
    while (msg := await recv_json(ws))["type"] not in ("done", "error") or msg.get("id") != rid:
        pass
    return msg


async def complete(conn: WsConnection, rid: str, doc: str, prefix: str = PREFIX) -> EngineEvent:
    evs = [ev async for ev in conn.complete(CompletionRequest(rid, doc, prefix, "", Plan(max_tokens=4)))]
    return evs[-1]


# -- item 5: origins, token, what unauthenticated peers see ----------------------------------------
async def test_browser_origins_are_refused(served: Served) -> None:
    for origin in ("https://evil.example", "null", "http://127.0.0.1:8080"):
        with pytest.raises(InvalidStatus) as exc:
            async with connect(served.url, origin=origin, additional_headers=bearer()):  # type: ignore[arg-type]
                pass
        assert exc.value.response.status_code == 403
    async with connect(served.url, additional_headers=bearer()) as ws:  # no Origin: an editor
        await ws.send(json.dumps({"type": "health"}))
        assert (await recv_json(ws))["ok"] is True


async def test_unauthenticated_peers_are_cut_off(served: Served) -> None:
    async with connect(served.url) as ws:  # says nothing: closed at the hello deadline
        assert await close_code(ws) == 1008
    async with connect(served.url) as ws:  # a flood before hello: 3 answers, then closed
        for _ in range(50):
            await ws.send(json.dumps({"type": "health"}))
        codes = []
        with pytest.raises(ConnectionClosed) as exc:
            while True:
                codes.append((await recv_json(ws))["code"])
        assert codes == ["unauthorized"] * 3 and exc.value.rcvd is not None and exc.value.rcvd.code == 1008
    async with connect(served.url, max_size=None) as ws:  # a frame above the pre-auth size
        await ws.send(json.dumps({"type": "hello", "token": "x" * 10_000}))
        assert await close_code(ws) == 1009
    async with connect(served.url) as ws:  # a wrong token: unauthorized, then 1008
        await ws.send(json.dumps({"type": "hello", "token": "wrong"}))
        assert (await recv_json(ws))["code"] == "unauthorized"
        assert await close_code(ws) == 1008
    refused = served.daemon.refused
    assert refused["hello_timeout"] >= 1 and refused["preauth_messages"] >= 1 and refused["token"] >= 1


async def test_token_authenticated_hello_keeps_what_clients_need(served: Served) -> None:
    async with connect(served.url) as ws:
        await ws.send(json.dumps({"type": "hello", "protocol": 1, "token": TOKEN}))
        hello = await recv_json(ws)
        assert hello["type"] == "hello" and hello["pid"] == os.getpid() and hello["model"]["path"]
        await ws.send(json.dumps({"type": "complete", "id": "big", "doc": "d", "prefix": "x" * 20_000}))
        assert (await until_done(ws, "big"))["code"] == "prompt_too_long"  # full frame size after hello


def test_the_daemon_requires_a_token_by_default(daemon: Daemon) -> None:
    token_file = daemon.runtime_dir / runtime.TOKEN_NAME
    assert daemon.token and token_file.read_text().strip() == daemon.token
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    assert stat.S_IMODE((daemon.runtime_dir / runtime.RUNTIME_NAME).stat().st_mode) == 0o600

    async def check() -> None:
        async with connect(daemon.url) as ws:
            await ws.send(json.dumps({"type": "health"}))
            assert (await recv_json(ws))["code"] == "unauthorized"
        with pytest.raises(InvalidStatus):
            async with connect(daemon.url, origin="https://evil.example",  # type: ignore[arg-type]
                               additional_headers=bearer(daemon.token)):
                pass
        c = await WsConnection.open(daemon.url, daemon.token)
        assert c.hello["pid"] == daemon.proc.pid
        await c.close()
    asyncio.run(check())


def test_a_daemon_without_token_hides_its_pid_and_model_path(tiny_model_dir: Path, tmp_path: Path) -> None:
    from tests.engine.daemon.daemon_helpers import start_daemon, stop_daemon

    d = start_daemon(tmp_path / "run", tiny_model_dir, "--no-token", "--max-batch", "1")
    try:
        assert d.token is None and not (tmp_path / "run" / runtime.TOKEN_NAME).exists()

        async def check() -> None:
            async with connect(d.url) as ws:
                for kind in ("hello", "health", "stats"):
                    await ws.send(json.dumps({"type": kind}))
                    reply = await recv_json(ws)
                    assert "pid" not in reply and str(tiny_model_dir) not in json.dumps(reply), reply
        asyncio.run(check())
    finally:
        stop_daemon(d)


# -- item 3: bounded replies, released state --------------------------------------------------------
async def test_a_reader_too_slow_for_its_replies_is_cut_off(served: Served) -> None:
    refused = served.daemon.refused
    before = refused["slow_reader"]
    async with connect(served.url, additional_headers=bearer()) as ws:
        sent = 0
        while refused["slow_reader"] == before and sent < 20_000:  # never reading the replies
            await ws.send(json.dumps({"type": "stats"}))
            sent += 1
        assert refused["slow_reader"] == before + 1, f"not cut off after {sent} unread stats replies"
        code = await close_code(ws, timeout=30)  # reading now: the replies sent, then the close
        assert code in (1013, None)  # None: the close frame did not fit before close_timeout_s
    async with connect(served.url, additional_headers=bearer()) as ws:  # the daemon serves on
        await ws.send(json.dumps({"type": "health"}))
        assert (await recv_json(ws))["ok"] is True


async def wait_connections(conn: WsConnection, n: int, timeout: float = 20.0) -> None:
    async def poll() -> None:
        while (await conn.query("health"))["connections"] != n:
            pass
    await asyncio.wait_for(poll(), timeout)


async def test_a_closed_connections_state_is_released(served: Served) -> None:
    d = served.daemon
    before = {c.id for c in d.live}
    a = await WsConnection.open(served.url, TOKEN)
    (a_id,) = {c.id for c in d.live} - before  # hello answered: its connection exists
    b = await WsConnection.open(served.url, TOKEN)
    assert (await complete(a, "a1", "docA")).kind == "done"
    assert any(e.owner == a_id for e in d.engine.prompt_cache.entries.values())
    await a.close()
    await wait_connections(b, 1)
    assert (await complete(b, "b1", "docB")).kind == "done"  # the scheduler applied a's drop before it
    gc.collect()
    assert a_id not in {c.id for c in d.live}
    assert not any(e.owner == a_id for e in d.engine.prompt_cache.entries.values())
    assert not any(k[0] == a_id for k in d.scheduler.finished)
    await b.close()


# -- item 4: one client cannot measure another's prompts ---------------------------------------------
async def test_the_prompt_cache_is_scoped_to_its_connection(served: Served) -> None:
    a, b = await WsConnection.open(served.url, TOKEN), await WsConnection.open(served.url, TOKEN)
    secret = "API_KEY = 'hunter2'\n" + PREFIX
    first = await complete(a, "s1", "secret.py", secret)
    assert first.stats is not None and first.stats["reused_tokens"] == 0
    probe = await complete(b, "p1", "guess.py", secret)  # the same text from another client
    assert probe.stats is not None and probe.stats["reused_tokens"] == 0
    again = await complete(a, "s2", "secret.py", secret)  # its own text is still reused
    assert again.stats is not None and again.stats["reused_tokens"] > 0
    await a.close()
    await b.close()


# -- item 8: lone surrogates -------------------------------------------------------------------------
async def test_lone_surrogates_keep_the_connection(served: Served) -> None:
    async with connect(served.url, additional_headers=bearer()) as ws:
        await ws.send('{"type": "health", "ref": "\\ud800"}')
        assert (await recv_json(ws))["ref"] == "\ud800"
        await ws.send('{"type": "complete", "id": "\\udc80x", "doc": "\\ud800", "prefix": "x = \\ud83d", '
                      '"suffix": "\\ude00", "plan": {"max_tokens": 3}}')
        assert (await until_done(ws, "\udc80x"))["type"] == "done"
        await ws.send('{"type": "hello", "token": "\\ud800"}')  # a bad token on an authenticated connection
        assert (await recv_json(ws))["type"] == "hello"
    async with connect(served.url) as ws:
        await ws.send('{"type": "hello", "token": "\\ud800"}')
        assert (await recv_json(ws))["code"] == "unauthorized"
        assert await close_code(ws) == 1008  # refused, not an internal error (1011)
    c = await WsConnection.open(served.url, TOKEN)  # the client side encodes them too
    last = await complete(c, "c\ud800", "doc\udfff", "y = '\ud800' + ")
    assert last.kind == "done" and c.open_
    await c.close()


# -- item 11: fair rows, private runtime files ----------------------------------------------------------
def _job(owner: str, rid: str, submitted: float) -> Job:
    return Job(CompletionRequest(rid, rid, "", ""), owner, lambda ev, code: None, 0.0, submitted=submitted)


def test_a_full_daemon_gives_a_row_from_the_biggest_holder_to_a_newcomer() -> None:
    jobs = [_job("a", f"a{i}", float(i)) for i in range(3)]
    victim = fair_share_victim(jobs, "b")
    assert victim is jobs[2]  # a's newest
    assert fair_share_victim(jobs, "a") is None  # one client alone may use every row
    assert fair_share_victim(jobs[:2] + [_job("b", "b0", 9.0)], "b") is None  # 2 vs 1: fair enough
    assert fair_share_victim(jobs[:2] + [_job("b", "b0", 9.0)], "c") is jobs[1]
    fork = _job("a", "a9", 10.0)
    fork.parent = jobs[0]
    assert fair_share_victim(jobs[:1] + [fork], "b") is None  # forks are not counted (preempted first)


def test_runtime_dir_owner_and_mode_are_checked(tmp_path: Path) -> None:
    open_dir = tmp_path / "open"
    open_dir.mkdir(mode=0o777)
    os.chmod(open_dir, 0o777)
    assert runtime.secure_dir(open_dir) == open_dir
    assert stat.S_IMODE(open_dir.stat().st_mode) == 0o700
    foreign = tmp_path / "foreign"
    foreign.mkdir(mode=0o700)
    if os.getuid() == 0:
        os.chown(foreign, 12345, 12345)
    else:
        foreign = Path("/")  # owned by root
    with pytest.raises(runtime.DaemonError, match="not to this user"):
        runtime.secure_dir(foreign)


def test_the_log_and_token_files_are_private(tmp_path: Path) -> None:
    log = tmp_path / runtime.LOG_NAME
    log.write_text("old\n")
    os.chmod(log, 0o644)
    os.close(runtime.open_private_log(log))
    assert stat.S_IMODE(log.stat().st_mode) == 0o600
    tok = tmp_path / runtime.TOKEN_NAME
    assert runtime.read_token(tok, create=True) and stat.S_IMODE(tok.stat().st_mode) == 0o600
    os.chmod(tok, 0o644)
    runtime.read_token(tok)
    assert stat.S_IMODE(tok.stat().st_mode) == 0o600
