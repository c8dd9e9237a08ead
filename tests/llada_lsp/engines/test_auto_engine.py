"""`engine = "auto"`: two real `llada-lsp` processes started together share one resident
engine daemon, auto-started detached from a temporary runtime dir, and both complete.
The daemon is stopped in teardown whatever happens."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from engine.daemon import runtime
from tests.llada_lsp.lsp_helpers import (
    complete_after,
    debug_info,
    first_text,
    needs_model,
    poll,
    server_config,
    server_session,
    start_session,
)

pytestmark = [pytest.mark.asyncio(loop_scope="function"), needs_model]

INIT = {"engine": "auto", "maxTokens": {"line": 12, "statements": 16, "block": 24},
        "speculative": False, "threads": 1}  # the `threads` option reaches the daemon it starts
NEEDLES = ["        return math.", "        b = ", "    name = ", "    print("]


def _kill_strays(run: Path) -> None:
    """A daemon still starting has no runtime file yet: find it by its own token file path
    (unique to this test) and stop it."""
    marker = str(run / runtime.TOKEN_NAME).encode()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            if marker in (proc / "cmdline").read_bytes():
                os.kill(int(proc.name), signal.SIGTERM)


_text = first_text  # the first item's text, "" when there is none


async def test_two_servers_share_one_auto_started_daemon(tmp_path: Path) -> None:
    run = tmp_path / "run"
    cfg = server_config(LLADA_RUNTIME_DIR=str(run))
    clients: list[Any] = []
    try:
        clients = list(await asyncio.gather(cfg.start(), cfg.start()))
        await asyncio.gather(*(start_session(c, INIT) for c in clients))
        infos = [await debug_info(c) for c in clients]
        pids = {i["engineInfo"].get("daemon_pid") for i in infos}
        assert len(pids) == 1 and None not in pids, infos
        registered = runtime.read_runtime(run)
        assert registered is not None and registered["pid"] in pids
        log = (run / runtime.LOG_NAME).read_text()
        assert log.count("serving ") == 1  # one daemon
        assert ", 1 threads" in log and "measured, re-checked" not in log, log  # fixed by the option
        answers: list[str] = []
        for needle in NEEDLES:  # the first position where the model suggests something
            res = await asyncio.gather(*(complete_after(c, needle, f"auto{k}-{len(needle)}.py")
                                         for k, c in enumerate(clients)))
            answers = [_text(r) for _, r in res]
            if any(answers):
                break
        assert all(answers), answers  # both servers got completions from the one daemon
        for c in clients:
            info = await debug_info(c)
            assert info["engineState"] == "ready" and info["engine"]["engine_calls"] >= 1
    finally:
        for c in clients:
            with contextlib.suppress(Exception):  # noqa: BLE001 - teardown goes on
                await asyncio.wait_for(c.shutdown_session(), 10)
            await c.stop()
        await asyncio.to_thread(runtime.stop_daemon, run)
        _kill_strays(run)
    assert runtime.read_runtime(run) is None


async def test_stop_holds_until_llada_start_engine(tmp_path: Path) -> None:
    """The daemon stopped with a hold (as `llada-engine stop` leaves it): the server's retries
    start nothing and its status says why; `llada.startEngine` starts a new daemon at once."""
    from lsprotocol import types as t

    from engine.daemon import lifetime

    run = tmp_path / "run"
    try:
        async with server_session(INIT, LLADA_RUNTIME_DIR=str(run)) as client:
            first = (await debug_info(client))["engineInfo"]["daemon_pid"]
            lifetime.set_hold(run, None)
            await asyncio.to_thread(runtime.stop_daemon, run)

            async def held() -> Any:
                info = await debug_info(client)
                return info if info["engine"].get("connect_errors", 0) >= 2 else None

            info = await poll(held, 60)
            assert info["engineState"] == "error" and "llada-engine stop" in info["engineError"], info
            assert any("llada-engine stop" in s.get("message", "") for s in client.statuses)
            assert runtime.read_runtime(run) is None  # the retries started nothing
            ok = await client.workspace_execute_command_async(t.ExecuteCommandParams(command="llada.startEngine"))
            assert ok is True

            async def ready() -> Any:
                i = await debug_info(client)
                return i if i["engineState"] == "ready" else None

            info = await poll(ready, 120)
            assert info["engineInfo"]["daemon_pid"] not in (None, first)
            assert lifetime.held(run) is None
    finally:
        await asyncio.to_thread(runtime.stop_daemon, run)
        _kill_strays(run)
