"""A raw JSON-RPC client of the real server process: framed bytes written to its stdin,
its framed output parsed (for tests that send what no well-behaved client library would, and
for bench/keystroke_cost.py, which times the server without a client library's overhead).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

INIT = {"capabilities": {}, "initializationOptions": {"engine": "ws://127.0.0.1:9"}}


def frame(body: bytes, length: int | None = None) -> bytes:
    return b"Content-Length: %d\r\n\r\n" % (len(body) if length is None else length) + body


def msg(obj: Any) -> bytes:
    return frame(json.dumps(obj).encode())


def request(msg_id: Any, method: str, params: Any = None, **extra: Any) -> dict[str, Any]:
    m: dict[str, Any] = {"jsonrpc": "2.0", "id": msg_id, "method": method, **extra}
    if params is not None:
        m["params"] = params
    return m


def notification(method: str, params: Any = None) -> dict[str, Any]:
    m: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        m["params"] = params
    return m


class Raw:
    """The server's stdin and a reader of its framed output."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        assert proc.stdin is not None and proc.stdout is not None
        self.proc, self.stdin, self.stdout = proc, proc.stdin, proc.stdout
        self.probes = 10**6

    async def read(self) -> dict[str, Any]:
        length = None
        while True:
            line = await self.stdout.readline()
            if not line:
                raise EOFError("the server closed its output")
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":")[1])
            elif not line.strip() and length is not None:
                return json.loads(await self.stdout.readexactly(length))

    async def write(self, data: bytes) -> None:
        self.stdin.write(data)
        await self.stdin.drain()

    async def answer(self, msg_id: Any, timeout: float | None = 30) -> dict[str, Any]:
        """The response to `msg_id` (responses to other ids and notifications skipped)."""
        while True:
            m = await asyncio.wait_for(self.read(), timeout)
            if "method" not in m and m.get("id") == msg_id:
                return m

    async def until(self, method: str, pred: Callable[[Any], bool] | None = None,
                    timeout: float = 30) -> dict[str, Any]:
        """The next notification or request `method` whose params satisfy `pred` (others skipped)."""
        while True:
            m = await asyncio.wait_for(self.read(), timeout)
            if m.get("method") == method and (pred is None or pred(m.get("params"))):
                return m

    async def send_then_probe(self, data: bytes, timeout: float = 30) -> list[dict[str, Any]]:
        """Write `data`, then a debugInfo request; the responses that came before its answer."""
        self.probes += 1
        probe = self.probes
        await self.write(data + msg(request(probe, "llada/debugInfo", {})))
        before: list[dict[str, Any]] = []
        while True:
            m = await asyncio.wait_for(self.read(), timeout)
            if m.get("id") == probe and "method" not in m:
                assert "result" in m and "options" in m["result"], m
                return before
            if "method" not in m:  # server-to-client requests/notifications are not answers
                before.append(m)


async def spawn(root: Path = ROOT) -> Raw:
    """The server process of the checkout at `root` (engine at a closed port: nothing loads),
    not yet initialized."""
    env = {**os.environ, "PYTHONPATH": str(root), "OMP_NUM_THREADS": "1"}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "llada_lsp", stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL, env=env, cwd=root)
    return Raw(proc)


async def initialized(root: Path = ROOT) -> Raw:
    """A server that answered initialize."""
    r = await spawn(root)
    await r.write(msg(request(1, "initialize", INIT)))
    assert "capabilities" in (await r.answer(1, 60))["result"]
    await r.write(msg(notification("initialized", {})))
    return r


async def stop(r: Raw) -> None:
    if r.proc.returncode is None:
        r.proc.kill()
        await r.proc.wait()
