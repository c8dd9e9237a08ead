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
from lsp_helpers import (
    DATA,
    debug_info,
    inline,
    needs_model,
    open_doc,
    position_of,
    server_config,
    start_session,
)

from engine.daemon import runtime

pytestmark = [pytest.mark.asyncio(loop_scope="function"), needs_model]

INIT = {"engine": "auto", "maxTokens": {"line": 12, "statements": 16, "block": 24},
        "speculative": False}
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


def _text(res: Any) -> str:
    if not res or not res.items:
        return ""
    ins = res.items[0].insert_text
    return ins if isinstance(ins, str) else ins.value


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
        assert (run / runtime.LOG_NAME).read_text().count("serving ") == 1  # one daemon
        text = (DATA / "shapes.py.txt").read_text()
        answers: list[str] = []
        for needle in NEEDLES:  # the first position where the model suggests something
            uris = [open_doc(c, "shapes.py.txt", "python",
                             uri=(DATA / f"auto{k}-{len(needle)}.py").as_uri())
                    for k, c in enumerate(clients)]
            res = await asyncio.gather(*(inline(c, u, position_of(text, needle))
                                         for c, u in zip(clients, uris, strict=True)))
            answers = [_text(r) for r in res]
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
