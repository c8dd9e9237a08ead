"""A new user's path in real VS Code: after `./dev demo` (the checkout's .venv holds llada-lsp)
and the README's install of the .vsix built in this checkout, the extension finds the server in
that .venv with no setting, no $LLADA_LSP and no PATH entry, and the real server with the
embedded model puts ghost text on screen. code-server 4.100.3 + chromium, as in
test_vscode_real.py."""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.editors.conftest import ROOT, needs_model
from tests.editors.test_vscode_real import screenshot_on_failure
from tests.fakes.vscode_real import (
    Workbench,
    vscode_build_lock,
    vscode_session,
    wait_for,
)

VENV_SERVER = ROOT / ".venv" / "bin" / "llada-lsp"
pytestmark = [
    pytest.mark.skipif(shutil.which("npm") is None or shutil.which("node") is None, reason="node/npm not installed"),
    pytest.mark.skipif(sys.platform != "linux", reason="the set-up script installs Debian packages"),
    pytest.mark.skipif(os.environ.get("LLADA_SKIP_REAL_EDITORS") == "1", reason="LLADA_SKIP_REAL_EDITORS=1"),
    pytest.mark.skipif(not VENV_SERVER.exists(), reason="no .venv/bin/llada-lsp in this checkout (./dev demo makes it)"),
    needs_model,
    pytest.mark.timeout(1800),
]


@pytest.fixture(scope="module")
def workbench(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Workbench, Any, Path]]:
    home = tmp_path_factory.mktemp("vscode-setup")
    files = {"shapes.py": "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n"}  # a project with no .venv of its own
    settings = {"workbench.startupEditor": "none", "security.workspace.trust.enabled": False,
                "editor.quickSuggestions": {"other": False, "comments": False, "strings": False},
                "llada.nextEdit.enabled": False, "python.defaultInterpreterPath": ""}
    # what a new user's shell has: no LLADA_LSP, no .venv on PATH
    path = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep)
                           if p and not (Path(p) / "llada-lsp").exists())
    env = {"LLADA_LSP": None, "VIRTUAL_ENV": None, "PATH": path, "OMP_NUM_THREADS": "1"}
    with vscode_session(home, files, settings, env) as (wb, page, _, _):
        yield wb, page, home


def test_the_checkouts_server_is_found_and_completes(workbench: tuple[Workbench, Any, Path]) -> None:
    wb, page, home = workbench
    with vscode_build_lock():  # another worker's test may be rebuilding out/
        assert json.loads((ROOT / "editors/vscode/out/checkout.json").read_text())["root"] == str(ROOT)
    with screenshot_on_failure(page, "setup-connects"):
        wait_for("the status item to say ready",
                 lambda: any("llada ready" in s["text"] for s in wb.status()), timeout=120)
        logs = list(home.glob("user-data/logs/*/exthost*/*/llada.log"))
        assert any(f"starting {VENV_SERVER}" in p.read_text() for p in logs), [p.read_text() for p in logs]
        page.keyboard.press("Control+End")
        page.keyboard.type("    return ", delay=40)
        ghost = wait_for("ghost text from the embedded model", lambda: wb.ghost().strip(), timeout=120)
        status = wait_for("the status item with a latency",
                          lambda: next((s["text"] for s in wb.status() if "ms" in s["text"]), None), timeout=60)
    print(f"ghost text {ghost!r}; status {status!r}")
