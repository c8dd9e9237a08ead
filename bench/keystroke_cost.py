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
import itertools
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.fakes.raw_lsp import Raw, initialized, msg, notification, request, stop  # noqa: E402

IDS = itertools.count(10)  # request ids (1 is initialize's)
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


async def start(root: Path) -> Raw:
    """The server of the checkout at `root`, initialized, its engine given up on (`error`)."""
    c = await initialized(root)
    await c.until("llada/status", lambda p: p.get("state") == "error")
    return c


def change(uri: str, version: int, line: int, col: int, ch: str) -> dict[str, Any]:
    pos = {"line": line, "character": col}
    return notification("textDocument/didChange", {
        "textDocument": {"uri": uri, "version": version},
        "contentChanges": [{"range": {"start": pos, "end": pos}, "text": ch}]})


async def type_into(c: Raw, uri: str, text: str, line: int, col: int, typed: str,
                    ask: str) -> list[float]:
    """Open `text`, type `typed` at (line, col); per keystroke ms (didChange + `ask`)."""
    await c.write(msg(notification("textDocument/didOpen", {
        "textDocument": {"uri": uri, "languageId": "python", "version": 1, "text": text}})))
    times = []
    for k, ch in enumerate(typed):
        edit = change(uri, k + 2, line, col, ch)
        line, col = (line + 1, 0) if ch == "\n" else (line, col + 1)
        req = request(next(IDS), "llada/debugInfo", {}) if ask == "debugInfo" else request(
            next(IDS), "textDocument/inlineCompletion", {
                "textDocument": {"uri": uri}, "position": {"line": line, "character": col},
                "context": {"triggerKind": 2}})
        t0 = time.perf_counter()
        await c.write(msg(edit) + msg(req))
        await c.answer(req["id"], timeout=None)  # timed: no wait_for task per message
        times.append((time.perf_counter() - t0) * 1000)
    await c.write(msg(notification("textDocument/didClose", {"textDocument": {"uri": uri}})))
    return times


async def floor(c: Raw, n: int) -> list[float]:
    times = []
    for _ in range(n):
        req = request(next(IDS), "llada/debugInfo", {})
        t0 = time.perf_counter()
        await c.write(msg(req))
        await c.answer(req["id"], timeout=None)  # timed: no wait_for task per message
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
        await stop(c)
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
