"""Server time per keystroke on a large file (`bench/lsp_latency.py --big-file LINES`).

A raw JSON-RPC client (framed bytes over the real server process's stdin/stdout) opens a
generated Python file of LINES lines (default 50,000) and types into the middle of it one
character at a time. Each keystroke writes a `didChange` and a request together, as an
editor does, and waits for the answer; the round trip is the server's time for that
keystroke plus the pipe transport (a `llada/debugInfo` alone measures the transport).

The engine is pointed at a closed port, so it is in the `error` state and costs nothing: an
inline completion request still does everything the server does before it asks the engine
(position checks, the incremental reparse, the infill plan and the context walk) and then
answers an empty list. Rows:

- `debugInfo alone`: the transport floor;
- `didChange + debugInfo`: the document update (text, line index, tree edit);
- `didChange + inlineCompletion`: the above, the reparse and the plan and context;
- `huge: didChange + inlineCompletion`: a 20 MB document (over `maxFileBytes`: no tree, no
  completions; its keystrokes should cost next to nothing).

`--server-root DIR` runs the server from another checkout (e.g. `git worktree add /tmp/old
HEAD` for the code before a change), to compare in one run.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TYPED = "\n    extra = compute(total, b)  # typed\n    print(extra)"


def python_file(lines: int) -> str:
    """A synthetic module of about `lines` lines: classes and functions, repeated."""
    out = ["import os", "import sys", ""]
    i = 0
    while len(out) < lines:
        out += [f"class C{i}:", f'    """Doc {i}."""', "",
                f"    def method_{i}(self, x):", f"        y = x + {i}", "        if y > 10:",
                "            return y * 2", "        return y", "", "",
                f"def func_{i}(a, b):", "    total = 0", "    for k in range(a):",
                "        total += k * b", "    return total", "", ""]
        i += 1
    return "\n".join(out[:lines]) + "\n"


def frame(obj: dict[str, Any]) -> bytes:
    body = json.dumps(obj).encode()
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


class RawClient:
    """The server process and a reader of its framed output."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        assert proc.stdin is not None and proc.stdout is not None
        self.proc, self.stdin, self.stdout = proc, proc.stdin, proc.stdout
        self.ids = 0

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

    async def write(self, *messages: dict[str, Any]) -> None:
        self.stdin.write(b"".join(frame(m) for m in messages))
        await self.stdin.drain()

    def request(self, method: str, params: Any) -> dict[str, Any]:
        self.ids += 1
        return {"jsonrpc": "2.0", "id": self.ids, "method": method, "params": params}

    async def answer(self, msg_id: int) -> dict[str, Any]:
        while True:
            m = await self.read()
            if m.get("id") == msg_id and "method" not in m:
                return m

    async def until(self, method: str, pred: Any = None) -> dict[str, Any]:
        while True:
            m = await self.read()
            if m.get("method") == method and (pred is None or pred(m.get("params"))):
                return m


async def start(root: Path) -> RawClient:
    env = {**os.environ, "PYTHONPATH": str(root), "OMP_NUM_THREADS": "1"}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "llada_lsp", stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL, env=env, cwd=root)
    c = RawClient(proc)
    init = c.request("initialize", {"capabilities": {}, "initializationOptions": {
        "engine": "ws://127.0.0.1:9"}})
    await c.write(init)
    await c.answer(init["id"])
    await c.write({"jsonrpc": "2.0", "method": "initialized", "params": {}})
    await c.until("llada/status", lambda p: p.get("state") == "error")
    return c


def change(uri: str, version: int, line: int, col: int, ch: str) -> dict[str, Any]:
    pos = {"line": line, "character": col}
    return {"jsonrpc": "2.0", "method": "textDocument/didChange", "params": {
        "textDocument": {"uri": uri, "version": version},
        "contentChanges": [{"range": {"start": pos, "end": pos}, "text": ch}]}}


async def type_into(c: RawClient, uri: str, text: str, line: int, col: int, typed: str,
                    ask: str) -> list[float]:
    """Open `text`, type `typed` at (line, col); per keystroke ms (didChange + `ask`)."""
    await c.write({"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {
        "textDocument": {"uri": uri, "languageId": "python", "version": 1, "text": text}}})
    times = []
    for k, ch in enumerate(typed):
        edit = change(uri, k + 2, line, col, ch)
        line, col = (line + 1, 0) if ch == "\n" else (line, col + 1)
        req = c.request("llada/debugInfo", {}) if ask == "debugInfo" else c.request(
            "textDocument/inlineCompletion", {
                "textDocument": {"uri": uri}, "position": {"line": line, "character": col},
                "context": {"triggerKind": 2}})
        t0 = time.perf_counter()
        await c.write(edit, req)
        await c.answer(req["id"])
        times.append((time.perf_counter() - t0) * 1000)
    await c.write({"jsonrpc": "2.0", "method": "textDocument/didClose", "params": {
        "textDocument": {"uri": uri}}})
    return times


async def floor(c: RawClient, n: int) -> list[float]:
    times = []
    for _ in range(n):
        req = c.request("llada/debugInfo", {})
        t0 = time.perf_counter()
        await c.write(req)
        await c.answer(req["id"])
        times.append((time.perf_counter() - t0) * 1000)
    return times


def summary(xs: list[float]) -> dict[str, float]:
    s = sorted(xs)
    return {"p50": round(statistics.median(s), 2),
            "p95": round(s[min(len(s) - 1, int(round(0.95 * (len(s) - 1))))], 2)}


async def measure(root: Path, lines: int, huge_mb: int) -> dict[str, dict[str, float]]:
    text = python_file(lines)
    rows = text.split("\n")
    line = next(i for i in range(len(rows) // 2, len(rows)) if rows[i] == "        total += k * b")
    col = len(rows[line])
    c = await start(root)
    try:
        out = {"debugInfo alone": summary(await floor(c, len(TYPED)))}
        out["didChange + debugInfo"] = summary(await type_into(
            c, "file:///bench/a.py", text, line, col, TYPED, "debugInfo"))
        out["didChange + inlineCompletion"] = summary(await type_into(
            c, "file:///bench/b.py", text, line, col, TYPED, "inline"))
        if huge_mb:
            big = python_file(lines) * max(1, (huge_mb << 20) // len(text))
            out["huge: didChange + inlineCompletion"] = summary(await type_into(
                c, "file:///bench/huge.py", big, line, col, TYPED, "inline"))
    finally:
        c.proc.kill()
        await c.proc.wait()
    return out


def run(lines: int, huge_mb: int, roots: dict[str, Path]) -> dict[str, Any]:
    """Measure each server root; print the table; return the figures."""
    res = {name: asyncio.run(measure(root, lines, huge_mb)) for name, root in roots.items()}
    print(f"server ms per keystroke, {lines}-line Python file ({len(TYPED)} keystrokes; "
          "round trip over stdio, this machine's CPU)")
    print(f"{'row':<38}" + "".join(f"{n + ' p50':>14}{n + ' p95':>14}" for n in res))
    for row in next(iter(res.values())):
        print(f"{row:<38}" + "".join(f"{r[row]['p50']:>14}{r[row]['p95']:>14}"
                                     for r in res.values()))
    return {"lines": lines, "keystrokes": len(TYPED), "huge_mb": huge_mb, **res}
