"""Daemon hardening, second round (issue 41): connections that have not proved the token get a
small pool of their own, so that the token holder always gets in (finding 5); JSON nested
deeper than the parser goes is a protocol error, not an internal one (1011) (finding 9); a slow
reader reads the documented close code 1013 after its close handshake timed out (finding 9;
the daemon now closes such a socket gracefully, flushing the close frame, instead of aborting
it; the 1006 of the report did not reproduce here with the old code either, so this test
guards the documented code rather than reproducing the report).

A real `Daemon` serves real websockets on loopback from a thread (`serve_in_thread`), with the
tiny real model."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from engine.service import TextEngine
from llada_lsp.engines.ws_engine import WsConnection
from tests.engine.daemon.daemon_helpers import Served, serve_in_thread, stop_served

TOKEN = "s3cret-token-2"


@pytest.fixture(scope="module")
def served(tiny_model_dir: Path) -> Iterator[Served]:
    engine = TextEngine(tiny_model_dir, max_prompt_tokens=256)
    s = serve_in_thread(engine, token=TOKEN, max_batch=2, hello_timeout_s=30.0, max_connections=4,
                        preauth_connections=6, preauth_per_address=3, max_backlog_bytes=64 * 1024,
                        close_timeout_s=0.5, max_message_bytes=65536)
    yield s
    stop_served(s)


async def recv_json(ws: ClientConnection, timeout: float = 20.0) -> dict:
    return json.loads(await asyncio.wait_for(ws.recv(), timeout))


async def open_unauthenticated(url: str, host: str, n: int) -> tuple[list[ClientConnection], int]:
    """Up to `n` connections from `host` that never authenticate; (the open ones, how many got 503)."""
    conns, refused = [], 0
    for _ in range(n):
        try:
            conns.append(await connect(url, additional_headers={}, open_timeout=10,
                                       **({"local_addr": (host, 0)} if host else {})))
        except InvalidStatus as e:
            assert e.response.status_code == 503
            refused += 1
    return conns, refused


async def test_unauthenticated_connections_cannot_take_the_token_holders_slot(served: Served) -> None:
    d = served.daemon
    conns: list[ClientConnection] = []
    try:
        got, refused = await open_unauthenticated(served.url, "127.0.0.1", 10)
        conns += got
        assert (len(got), refused) == (3, 7)  # per address
        for host in ("127.0.0.2", "127.0.0.3", "127.0.0.4"):
            got, refused = await open_unauthenticated(served.url, host, 3)
            conns += got
        assert sum(d.preauth.values()) == 6 and len(conns) == 6  # in all
        assert d.refused["preauth_connections"] >= 7 + 3
        # the token holder, as the language server connects (header and hello): in, every time
        clients = [await WsConnection.open(served.url, TOKEN) for _ in range(4)]
        assert all(c.hello["type"] == "hello" for c in clients)
        with pytest.raises(InvalidStatus) as exc:  # its own quota is max_connections
            await connect(served.url, additional_headers={"Authorization": f"Bearer {TOKEN}"})
        assert exc.value.response.status_code == 503
        for c in clients:
            await c.close()
        # a pre-auth connection that sends the right hello leaves the pool
        await conns[0].send(json.dumps({"type": "hello", "protocol": 1, "token": TOKEN}))
        assert (await recv_json(conns[0]))["type"] == "hello"
        assert sum(d.preauth.values()) == 5
    finally:
        for c in conns:
            with contextlib.suppress(Exception):
                await c.close()


async def test_nested_json_is_a_protocol_error_and_keeps_the_connection(served: Served) -> None:
    async with connect(served.url, additional_headers={"Authorization": f"Bearer {TOKEN}"}) as ws:
        for depth in (30_000, 2_000):
            await ws.send("[" * depth + "]" * depth)
            err = await recv_json(ws)
            assert err["type"] == "error" and err["code"] == "bad_json", err
            await ws.send(json.dumps({"type": "health"}))  # the connection lives on
            assert (await recv_json(ws))["ok"] is True


async def test_a_slow_reader_reads_the_documented_close_code(served: Served) -> None:
    d = served.daemon
    before = d.refused["slow_reader"]
    async with connect(served.url, additional_headers={"Authorization": f"Bearer {TOKEN}"}) as ws:
        sent = 0
        while d.refused["slow_reader"] == before and sent < 20_000:  # never reading the replies
            await ws.send(json.dumps({"type": "stats"}))
            sent += 1
        assert d.refused["slow_reader"] == before + 1, f"not cut off after {sent} unread replies"
        cut = next(c for c in list(d.live) if c.closing is not None and c.closing[0] == 1013)
        while cut._closer is None or not cut._closer.done():  # the close handshake gave up waiting
            await asyncio.sleep(0.05)
        with pytest.raises(ConnectionClosed) as exc:  # reading only now, long after close_timeout_s
            while True:
                await asyncio.wait_for(ws.recv(), 20)
        assert exc.value.rcvd is not None and exc.value.rcvd.code == 1013
