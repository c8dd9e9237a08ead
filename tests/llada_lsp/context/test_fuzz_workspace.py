"""The hostile-workspace fuzz (issue 41): generated repositories (tests/llada_lsp/hostile_workspace.py:
links out of the workspace to a secret, special files, huge and binary files, odd names, deep
trees) are opened one after another as the workspace folder of the real server process over
stdio; each gets two inline completions (the first starts the index's scan, the second, after
the scan, is built with its definitions) and didOpen/didClose of its special files.

The observation point is the engine's wire: the server's engine is `ws://` to a recording
websocket server on 127.0.0.1 that answers like a daemon, so every byte the server sends
toward an engine (prefix, suffix, document key, workspace context) is recorded. The secret's
marker (also in the server's environment, for `/proc/self/environ`) must never appear there;
the good file's definition must (the control that context is observed at all). Every request
must be answered within HANG_S, and the process must live to the end.

Issue 49's tricks (hostile_workspace.py): gitignored and secret-named files, control-character
names, open tabs of secrets, of files outside the workspace and of other languages, `engine/`
and `llada_lsp/` packages; the good open tab must arrive too.

- CI: 4 workspaces (`test_hostile_workspaces_short`) and one with every trick
  (`test_every_trick_at_once`);
- `pytest -m fuzz tests/llada_lsp/context/test_fuzz_workspace.py -s`: `LLADA_FUZZ_WORKSPACES` (1,000)
  workspaces, seed `LLADA_FUZZ_SEED`; prints its figures (leaks, hangs, crashes, time).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import secrets
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.raw_lsp import Raw, msg, notification, request
from tests.llada_lsp.hostile_workspace import (
    GOOD_NAME,
    GOOD_TAB,
    RAN,
    app_text,
    make_secret,
    make_workspace,
    remove,
    tabs_for,
)
from tests.llada_lsp.lsp_helpers import ROOT, recording_daemon

HANG_S = 30.0


class Fuzz:
    def __init__(self, r: Raw, received: list[str], marker: str, every: bool = False) -> None:
        self.r, self.received, self.marker, self.every = r, received, marker, every
        self.ids = 100
        self.leaks = self.hangs = self.crashes = self.controls = self.good_tabs = 0
        self.seen = 0  # messages of `received` checked

    async def call(self, method: str, params: dict[str, Any]) -> dict[str, Any] | None:
        self.ids += 1
        await self.r.write(msg(request(self.ids, method, params)))
        try:
            return await self.r.answer(self.ids, HANG_S)
        except TimeoutError:
            self.hangs += 1
            return None
        except EOFError:
            self.crashes += 1
            raise

    async def notify(self, method: str, params: dict[str, Any]) -> None:
        await self.r.write(msg(notification(method, params)))

    async def inline(self, uri: str, text: str) -> None:
        line = text.count("\n")
        await self.call("textDocument/inlineCompletion", {
            "textDocument": {"uri": uri}, "position": {"line": line, "character": len(text.split("\n")[-1])},
            "context": {"triggerKind": 1}})

    async def indexed(self) -> None:
        """Until the index's background scan has ended (debugInfo says so)."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < HANG_S:
            info = await self.call("llada/debugInfo", {})
            if info is None or not info["result"].get("workspaceContext", {}).get("indexing"):
                return
        self.hangs += 1

    def check(self) -> None:
        for raw in self.received[self.seen:]:
            if self.marker in raw:
                self.leaks += 1
            m = json.loads(raw)
            if any(f"def {GOOD_NAME}" in c.get("text", "") for c in m.get("context", ())):
                self.controls += 1
            if any(f"def {GOOD_TAB}" in c.get("text", "") for c in m.get("context", ())):
                self.good_tabs += 1
        self.seen = len(self.received)

    async def workspace(self, rng: random.Random, ws: Path, outside: Path, prev: Path | None) -> dict[str, int]:
        kinds = make_workspace(rng, ws, outside, self.marker, self.every)
        await self.notify("workspace/didChangeWorkspaceFolders", {"event": {
            "added": [{"uri": ws.as_uri(), "name": ws.name}],
            "removed": [{"uri": prev.as_uri(), "name": prev.name}] if prev else []}})
        tabs = tabs_for(kinds, ws, outside, self.marker)
        for tab, language, tab_text in tabs:  # open beside app.py, as an editor's tabs
            await self.notify("textDocument/didOpen", {"textDocument": {
                "uri": tab, "languageId": language, "version": 1, "text": tab_text}})
        uri, text = (ws / "app.py").as_uri(), f"# {ws.name}\n" + app_text()  # no answer cached from before
        await self.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "python",
                                                                    "version": 1, "text": text}})
        await self.inline(uri, text)  # starts the scan
        await self.indexed()
        end = {"line": text.count("\n"), "character": len(text.split("\n")[-1])}
        await self.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": 2}, "contentChanges": [
            {"range": {"start": end, "end": end}, "text": "a + "}]})
        await self.inline(uri, text + "a + ")  # a new request, with the workspace's definitions
        for name in os.listdir(ws):  # the special files opened and closed as an editor would
            if name.endswith(".py") and name != "app.py":
                other = (ws / name).as_uri()
                await self.notify("textDocument/didOpen", {"textDocument": {
                    "uri": other, "languageId": "python", "version": 1, "text": "x = 1\n"}})
                await self.notify("textDocument/didClose", {"textDocument": {"uri": other}})
        for tab, _, _ in tabs:
            await self.notify("textDocument/didClose", {"textDocument": {"uri": tab}})
        await self.notify("textDocument/didClose", {"textDocument": {"uri": uri}})
        await self.call("llada/debugInfo", {})
        self.check()
        return kinds


async def spawn(marker: str) -> Raw:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "LLADA_FUZZ_SECRET": marker}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "llada_lsp", stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL, env=env, cwd=ROOT, limit=2**24)
    return Raw(proc)


async def run(n: int, seed: int, base: Path, every: bool = False) -> dict[str, Any]:
    marker = "LEAK-" + secrets.token_hex(8)
    outside = base / "outside"
    make_secret(outside, marker)
    rng = random.Random(seed)
    t0 = time.monotonic()
    async with recording_daemon() as (url, received):
        r = await spawn(marker)
        f = Fuzz(r, received, marker, every)
        try:
            await r.write(msg(request(1, "initialize", {"processId": None, "rootUri": None, "capabilities": {},
                                                        "initializationOptions": {"engine": url, "speculative": False}})))
            await r.answer(1, 60)
            await r.write(msg(notification("initialized", {})))
            while not any('"complete"' in m for m in received):  # until the engine is up
                warm = base / "warm"
                warm.mkdir(exist_ok=True)
                await f.notify("textDocument/didOpen", {"textDocument": {
                    "uri": (warm / "w.py").as_uri(), "languageId": "python", "version": 1, "text": "x = "}})
                await f.inline((warm / "w.py").as_uri(), "x = ")
                if time.monotonic() - t0 > 60:
                    raise AssertionError("the engine never came up")
            kinds: dict[str, int] = {}
            prev = None
            for i in range(n):
                ws = base / f"ws{i}"
                for k, v in (await f.workspace(rng, ws, outside, prev)).items():
                    kinds[k] = kinds.get(k, 0) + v
                if prev is not None:
                    remove(prev)
                prev = ws
            alive = r.proc.returncode is None and await f.call("llada/debugInfo", {}) is not None
        except EOFError:
            alive = False
        finally:
            if r.proc.returncode is None:
                r.proc.kill()
                await r.proc.wait()
    completes = sum('"complete"' in m for m in received)
    return {"workspaces": n, "seed": seed, "leaks": f.leaks, "hangs": f.hangs, "crashes": f.crashes + (not alive),
            "ran": (outside / RAN).exists(), "engine_requests": completes, "with_good_context": f.controls,
            "with_good_tab": f.good_tabs, "tricks": kinds, "seconds": round(time.monotonic() - t0, 1)}


def check(report: dict[str, Any]) -> None:
    assert report["leaks"] == 0 and report["hangs"] == 0 and report["crashes"] == 0, report
    assert not report["ran"], report  # no file of a workspace ran
    assert report["with_good_context"] >= report["workspaces"] // 2, report  # context was observed
    assert report["with_good_tab"] >= report["workspaces"] // 2, report  # and an open tab's


@pytest.mark.asyncio(loop_scope="function")
async def test_hostile_workspaces_short(tmp_path: Path) -> None:
    base = Path(tmp_path_outside_pytest())
    try:
        check(await run(4, 41, base))
    finally:
        remove(base)


@pytest.mark.asyncio(loop_scope="function")
async def test_a_secret_document_is_not_completed(tmp_path: Path) -> None:
    """Typing in `.env` (or a key, or a file the user's `exclude` names) sends nothing to the
    engine, as Copilot does; a Python file beside it is completed (the control)."""
    marker = "ENV-" + secrets.token_hex(8)
    (tmp_path / "conf").mkdir()
    async with recording_daemon() as (url, received):
        r = await spawn(marker)
        f = Fuzz(r, received, marker)
        try:
            await r.write(msg(request(1, "initialize", {
                "processId": None, "rootUri": tmp_path.as_uri(), "capabilities": {},
                "initializationOptions": {"engine": url, "speculative": False, "exclude": ["conf/"]}})))
            await r.answer(1, 60)
            await r.write(msg(notification("initialized", {})))
            docs = [(tmp_path / ".env", "dotenv", f"API_KEY={marker}\nDB_PASSWORD="),
                    (tmp_path / "deploy.key", "plaintext", f"{marker}\n"),
                    (tmp_path / "conf" / "prod.py", "python", f"TOKEN = '{marker}'\nx = ")]
            for path, lang, text in docs:
                await f.notify("textDocument/didOpen", {"textDocument": {
                    "uri": path.as_uri(), "languageId": lang, "version": 1, "text": text}})
                await f.inline(path.as_uri(), text)
            control = (tmp_path / "app.py").as_uri()
            t0 = time.monotonic()
            while not any('"complete"' in m for m in received):  # until the engine answers the control
                assert time.monotonic() - t0 < 60, "the engine never came up"
                await f.notify("textDocument/didOpen", {"textDocument": {
                    "uri": control, "languageId": "python", "version": 1, "text": "x = "}})
                await f.inline(control, "x = ")
                await f.notify("textDocument/didClose", {"textDocument": {"uri": control}})
            for path, _, text in docs:  # asked again once the engine is up
                await f.inline(path.as_uri(), text)
            await f.call("llada/debugInfo", {})
        finally:
            r.proc.kill()
            await r.proc.wait()
    assert not any(marker in m for m in received), [m[:200] for m in received if marker in m]
    assert f.hangs == 0


@pytest.mark.asyncio(loop_scope="function")
async def test_every_trick_at_once() -> None:
    """One workspace with every trick (issue 49's among them): no marker in any prompt, no
    workspace file ran, and both the good definition and the good open tab arrived."""
    base = Path(tmp_path_outside_pytest())
    try:
        report = await run(1, 49, base, every=True)
    finally:
        remove(base)
    assert {"gitignored", "secret_named", "control_names", "tab_outside", "tab_other_language",
            "engine_package", "hostile_gitignore"} <= set(report["tricks"]), report
    check(report)


@pytest.mark.fuzz
@pytest.mark.timeout(3600)
@pytest.mark.asyncio(loop_scope="function")
async def test_hostile_workspaces_long() -> None:
    n = int(os.environ.get("LLADA_FUZZ_WORKSPACES", "1000"))
    seed = int(os.environ.get("LLADA_FUZZ_SEED", "41"))
    base = Path(tmp_path_outside_pytest())
    try:
        report = await run(n, seed, base)
    finally:
        remove(base)
    print("\nworkspace fuzz:", json.dumps(report))
    check(report)


def tmp_path_outside_pytest() -> str:
    """Deep trees break pytest's own clean-up of tmp_path (shutil.rmtree recurses)."""
    import tempfile
    return tempfile.mkdtemp(prefix="llada-hostile-")
