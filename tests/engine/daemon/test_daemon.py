"""The daemon on loopback: real subprocesses, real websockets, no fixed sleeps."""

from __future__ import annotations

import asyncio
import json
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from engine.api import CompletionRequest, ContextChunk, EngineEvent, Plan
from llada_lsp.engines.ws_engine import WsConnection, WsEngineClient
from tests.engine.daemon.daemon_helpers import ROOT, Daemon, child_env

PREFIX = "def fibonacci(n):\n    if n < 2:\n        return n\n    "


def long_plan(n: int = 200) -> Plan:
    return Plan(max_tokens=n, preset="one_per_step")


def bearer(d: Daemon) -> dict[str, str]:
    return {"Authorization": f"Bearer {d.token}"}


async def collect(stream) -> list[EngineEvent]:  # noqa: ANN001
    return [ev async for ev in stream]


async def raw_exchange(ws, msg: str | bytes) -> dict:  # noqa: ANN001
    await ws.send(msg)
    return json.loads(await asyncio.wait_for(ws.recv(), 10))


async def wait_idle(conn: WsConnection, timeout: float = 20.0) -> dict:
    async def poll() -> dict:
        while True:
            h = await conn.query("health")
            if h["running"] == 0:
                return h
            await asyncio.sleep(0.02)
    return await asyncio.wait_for(poll(), timeout)


async def test_two_clients_concurrently_match_solo(daemon: Daemon) -> None:
    a, b = await WsConnection.open(daemon.url, daemon.token), await WsConnection.open(daemon.url, daemon.token)
    reqs = [(a, PREFIX, "\n\nprint(fibonacci(10))\n", Plan(max_tokens=24)),
            (b, "import os\n\nclass Runtime:\n    def path(self):\n        return ", "", Plan(max_tokens=20, stop="line"))]
    solo = []
    for i, (c, pre, suf, plan) in enumerate(reqs):
        evs = await collect(c.complete(CompletionRequest(f"solo{i}", f"s{i}", pre, suf, plan)))
        solo.append([(e.kind, e.text) for e in evs])
    together = await asyncio.gather(*(collect(c.complete(CompletionRequest(f"t{i}", f"t{i}", pre, suf, plan)))
                                      for i, (c, pre, suf, plan) in enumerate(reqs)))
    for i, evs in enumerate(together):
        assert [(e.kind, e.text) for e in evs] == solo[i]
        assert evs[-1].kind == "done" and evs[-1].stats is not None
    assert max(evs[-1].stats["avg_batch"] for evs in together) > 1  # they shared forwards
    for c in (a, b):
        await c.close()


async def test_cancel_stops_within_a_step_and_the_daemon_supersedes_nothing(daemon: Daemon) -> None:
    c = await WsConnection.open(daemon.url, daemon.token)
    seen: list[EngineEvent] = []
    async for ev in c.complete(CompletionRequest("r1", "docA", PREFIX, "", long_plan())):
        if not seen:
            await c.cancel("r1")
        seen.append(ev)
    done = seen[-1]
    assert done.kind == "done" and done.reason == "cancelled" and done.step < 100  # budget: 200 forwards

    # the same document again: both run (a client ends its older request with a cancel,
    # llada_lsp.engines.engine_base.EngineClient.supersede; the daemon decides nothing of it)
    stream = c.complete(CompletionRequest("r2", "docA", PREFIX, "", long_plan()))
    first = await stream.__anext__()
    assert first.kind == "draft"
    r3 = await collect(c.complete(CompletionRequest("r3", "docA", PREFIX, "", Plan(max_tokens=8))))
    assert r3[-1].kind == "done" and r3[-1].reason not in ("cancelled", "superseded")
    await c.cancel("r2")  # r2 ran on beside r3: only this ends it
    rest = [ev async for ev in stream]
    assert rest[-1].kind == "done" and rest[-1].reason == "cancelled" and rest[-1].step < 100
    stats = (await c.query("stats"))["stats"]
    assert stats["cancelled"] >= 2 and "superseded" not in stats
    await c.close()


async def test_disconnect_frees_the_slot_busy_and_fair_rows(daemon: Daemon) -> None:
    a, b = await WsConnection.open(daemon.url, daemon.token), await WsConnection.open(daemon.url, daemon.token)
    streams = [a.complete(CompletionRequest(f"a{i}", f"d{i}", PREFIX, "", long_plan())) for i in range(3)]
    for s in streams:  # all three rows are busy decoding
        assert (await s.__anext__()).kind == "draft"
    busy = await collect(a.complete(CompletionRequest("a3", "x", PREFIX, "", Plan(max_tokens=4))))
    assert busy[-1].kind == "error" and "busy" in (busy[-1].error or "")  # one client: no hidden queue
    # another connection takes a row from the one holding them all: a's newest request ends busy
    fair = asyncio.create_task(collect(b.complete(CompletionRequest("b0", "x", PREFIX, "", Plan(max_tokens=4)))))
    victim = [ev async for ev in streams[2]]
    assert victim[-1].kind == "error" and "busy" in (victim[-1].error or "")
    assert (await fair)[-1].kind == "done"
    assert (await b.query("stats"))["stats"]["preempted"] >= 1
    a.ws.transport.abort()  # the client dies without a close handshake
    await wait_idle(b)
    got = await asyncio.gather(*(collect(b.complete(CompletionRequest(f"b{i}", f"y{i}", PREFIX, "", Plan(max_tokens=8))))
                                 for i in range(2, 5)))
    assert all(evs[-1].kind == "done" for evs in got)
    await b.close()


async def test_workspace_context_reaches_the_prompt(daemon: Daemon) -> None:
    """A `complete` with context builds a longer prompt than the same one without (docs/protocol.md)."""
    conn = await WsConnection.open(daemon.url, daemon.token)
    ctx = (ContextChunk("util.py", "def helper(a, b):\n    return a * b + 1\n"),)
    sizes = []
    for i, context in enumerate(((), ctx)):
        evs = await collect(conn.complete(CompletionRequest(f"c{i}", f"ctx{i}", PREFIX, "", Plan(max_tokens=4),
                                                            context)))
        assert evs[-1].kind == "done", evs[-1]
        sizes.append(evs[-1].stats["prefill_tokens"] + evs[-1].stats["reused_tokens"])
    assert sizes[1] > sizes[0] + 10, sizes
    await conn.close()


async def test_bad_input_gets_errors_and_the_connection_stays_usable(daemon: Daemon) -> None:
    ok = {"type": "complete", "id": "ok", "doc": "d", "prefix": PREFIX, "suffix": "", "plan": {"max_tokens": 4}}
    async with connect(daemon.url, max_size=None, additional_headers=bearer(daemon)) as ws:
        cases: list[tuple[str | bytes, str]] = [
            ("{not json", "bad_json"),
            ("[1, 2]", "bad_message"),
            (json.dumps({"type": "frobnicate", "id": "f"}), "unknown_type"),
            (json.dumps({**ok, "type": "next_edit", "region": "x"}), "unknown_type"),  # gone with issue 42
            (json.dumps({**ok, "doc": None}), "bad_message"),
            (json.dumps({**ok, "plan": {"max_tokens": -1}}), "invalid_plan"),
            (json.dumps({**ok, "plan": {"stop": "sometimes"}}), "invalid_plan"),
            (json.dumps({**ok, "plan": {"bogus": 1}}), "invalid_plan"),
            (json.dumps({**ok, "plan": {"preset": "warp"}}), "invalid_plan"),
            (json.dumps({**ok, "plan": {"alternatives": 0}}), "invalid_plan"),
            (json.dumps({**ok, "plan": {"alternatives": 9}}), "invalid_plan"),
            (json.dumps({**ok, "plan": {"alternatives": "all"}}), "invalid_plan"),
            (json.dumps({**ok, "context": [{"path": 1, "text": "x"}]}), "bad_message"),
            (json.dumps({**ok, "context": "def helper(): pass"}), "bad_message"),
            (json.dumps({**ok, "prefix": "x" * 5000}), "prompt_too_long"),
            (json.dumps({**ok, "model": "nobody/no-such-model"}), "unknown_model"),
            (json.dumps({"type": "hello", "protocol": 99}), "unsupported_version"),
            (json.dumps({**ok, "prefix": "x" * 100_000}), "too_large"),
            (b"\x00\x01", "bad_message"),
        ]
        for msg, code in cases:
            reply = await raw_exchange(ws, msg)
            assert reply["type"] == "error" and reply["code"] == code, (msg[:80], reply)
            assert reply["error"]
        await ws.send(json.dumps({"type": "cancel", "id": "never-ran"}))  # a no-op, no reply
        assert (await raw_exchange(ws, json.dumps({"type": "health", "ref": "h1"})))["ref"] == "h1"
        await ws.send(json.dumps(ok))
        while (reply := json.loads(await asyncio.wait_for(ws.recv(), 20)))["type"] not in ("done", "error"):
            pass
        assert reply["type"] == "done" and reply["id"] == "ok" and reply["stats"]["total_ms"] > 0
        assert reply["alternatives"] == []
        await ws.send("x" * 300_000)  # above the frame limit: the connection is closed (1009)
        with pytest.raises(ConnectionClosed) as exc:
            await asyncio.wait_for(ws.recv(), 10)
        assert exc.value.rcvd is not None and exc.value.rcvd.code == 1009
    async with connect(daemon.url, additional_headers=bearer(daemon)) as ws:  # the daemon keeps serving
        assert (await raw_exchange(ws, json.dumps({"type": "health"})))["ok"] is True


async def test_engine_client_interface(daemon: Daemon) -> None:
    eng = WsEngineClient(daemon.url, token=daemon.token)
    progress: list[int] = []
    await eng.start(lambda msg, pct: progress.append(pct))
    assert eng.ready and eng.info["model"] and progress[-1] == 100
    old = eng.submit(CompletionRequest("e1", "doc", PREFIX, "", long_plan()))
    new = eng.submit(CompletionRequest("e2", "doc", PREFIX, "", Plan(max_tokens=6)))
    old_events = [ev async for ev, _ in old.events()]
    assert old_events[-1].reason == "superseded"
    new_events = [ev async for ev, _ in new.events()]
    assert new_events[-1].kind == "done" and new_events[-1].reason != "superseded"
    job = eng.submit(CompletionRequest("e3", "doc2", PREFIX, "", long_plan()))
    async for ev, _ in job.events():
        if ev.kind == "draft":
            job.cancel()
    assert ev.kind == "done" and ev.reason == "cancelled"
    re = eng.remask(new, [(0, 2)])
    assert re is not None and [ev async for ev, _ in re.events()][-1].kind == "done"
    assert eng.running() == 0
    await eng.close()


CLIENT = """
import asyncio, json, sys
from llada_lsp.engines.ws_engine import connect_or_start
async def main():
    c = await connect_or_start(timeout=120)
    h = await c.query("health")
    print(json.dumps({"pid": h["pid"], "torch": "torch" in sys.modules, "url": c.hello["model"]["path"]}))
    await c.close()
asyncio.run(main())
"""


def engine_cli(env: dict[str, str], *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "engine.daemon.cli", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout)


def test_auto_start_from_two_processes_gives_one_daemon_with_a_token(tiny_model_dir: Path, tmp_path: Path) -> None:
    env = child_env(tmp_path / "run", tiny_model_dir)
    procs = [subprocess.Popen([sys.executable, "-c", CLIENT], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=150) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    res = [json.loads(o.strip().splitlines()[-1]) for o, _ in outs]
    assert res[0]["pid"] == res[1]["pid"] and not any(r["torch"] for r in res)
    info = json.loads((tmp_path / "run" / "engine.json").read_text())
    assert info["pid"] == res[0]["pid"] and info["token"]
    assert (tmp_path / "run" / "engine.log").read_text().count("serving ") == 1
    assert stat.S_IMODE((tmp_path / "run" / "engine.log").stat().st_mode) == 0o600
    try:
        asyncio.run(_token_checks(info["url"], info["token"]))
        st = engine_cli(env, "status")
        assert st.returncode == 0 and str(info["pid"]) in st.stdout, st
    finally:
        sp = engine_cli(env, "stop")
    assert sp.returncode == 0 and "stopped" in sp.stdout, sp
    assert not (tmp_path / "run" / "engine.json").exists()
    assert engine_cli(env, "status").returncode == 1


async def _token_checks(url: str, token: str) -> None:
    async with connect(url) as ws:  # no hello: nothing but an unauthorized error
        reply = await raw_exchange(ws, json.dumps({"type": "health"}))
        assert reply["code"] == "unauthorized"
        reply = await raw_exchange(ws, json.dumps({"type": "hello", "token": "wrong"}))
        assert reply["code"] == "unauthorized"
        with pytest.raises(ConnectionClosed):
            await asyncio.wait_for(ws.recv(), 10)
    with pytest.raises(InvalidStatus):
        async with connect(url, additional_headers={"Authorization": "Bearer wrong"}):
            pass
    async with connect(url, additional_headers={"Authorization": f"Bearer {token}"}) as ws:
        assert (await raw_exchange(ws, json.dumps({"type": "health"})))["ok"] is True
    c = await WsConnection.open(url, token)  # the daemon kept serving
    evs = await collect(c.complete(CompletionRequest("t", "d", PREFIX, "", Plan(max_tokens=4))))
    assert evs[-1].kind == "done"
    await c.close()


def test_cli_refusals(tmp_path: Path) -> None:
    env = child_env(tmp_path / "run")
    env["HF_HUB_CACHE"] = str(tmp_path / "hf")
    r = engine_cli(env, "serve", "--model", "someorg/missing-model")
    assert r.returncode == 2 and "huggingface-cli download someorg/missing-model" in r.stderr
    assert str(tmp_path / "hf") in r.stderr
    r = engine_cli(env, "serve", "--model", str(tmp_path), "--host", "0.0.0.0")
    assert r.returncode == 2 and "config.json" in r.stderr
    r = engine_cli(env, "serve", "--model", str(ROOT / "tests"), "--host", "0.0.0.0")
    assert r.returncode == 2
    assert engine_cli(env, "stop").returncode == 1


def test_non_loopback_needs_a_token(tiny_model_dir: Path, tmp_path: Path) -> None:
    env = child_env(tmp_path / "run")
    r = engine_cli(env, "serve", "--model", str(tiny_model_dir), "--host", "0.0.0.0", "--no-token")
    assert r.returncode == 2 and "token" in r.stderr



def test_default_cpu_threads_use_every_core_for_float32_and_leave_one_for_bfloat16() -> None:
    import torch

    from engine.daemon.cli import default_cpu_threads

    assert default_cpu_threads(2, torch.float32) == 2
    assert default_cpu_threads(2, torch.bfloat16) == 1
    assert default_cpu_threads(16, torch.bfloat16) == 15
    assert default_cpu_threads(1, torch.bfloat16) == 1
