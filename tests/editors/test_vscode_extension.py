"""The VS Code extension (editors/vscode): npm ci, tsc build, eslint, and its node tests,
which talk to the real server over stdio through vscode-jsonrpc."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time

import pytest

from tests.editors.conftest import ROOT, server_command, server_env
from tests.fakes.vscode_real import vscode_build_lock

VSCODE = ROOT / "editors" / "vscode"
NPM = shutil.which("npm")
NODE = shutil.which("node")


def node_major() -> int:
    assert NODE is not None
    out = subprocess.run([NODE, "--version"], capture_output=True, text=True, check=True).stdout
    return int(out.strip().lstrip("v").split(".")[0])


pytestmark = [
    pytest.mark.skipif(NPM is None or NODE is None, reason="node/npm not installed (Node 20+)"),
    pytest.mark.skipif(NODE is not None and node_major() < 20, reason="needs Node 20 or newer"),
]


def npm(*args: str, timeout: float, env: dict[str, str] | None = None) -> float:
    assert NPM is not None
    t0 = time.monotonic()
    proc = subprocess.run([NPM, *args], cwd=VSCODE, capture_output=True, text=True,
                          timeout=timeout, env=env, check=False)
    assert proc.returncode == 0, f"npm {' '.join(args)} failed:\n{proc.stdout[-6000:]}\n{proc.stderr[-4000:]}"
    return time.monotonic() - t0


def installed_matches_lock() -> bool:
    """node_modules already holds exactly the locked packages (then `npm ci` is skipped)."""
    installed = VSCODE / "node_modules" / ".package-lock.json"
    if not installed.exists():
        return False
    lock = json.loads((VSCODE / "package-lock.json").read_text())["packages"]
    have = json.loads(installed.read_text())["packages"]
    want = {k: v.get("version") for k, v in lock.items() if k}
    return want == {k: v.get("version") for k, v in have.items() if k}


@pytest.mark.timeout(1800)
def test_build_lint_and_node_tests() -> None:
    """The limits are watchdogs against a hung step, far above a quiet machine's times (ci about
    10 s, build 10 s, lint 15 s, test about 60 s): a shared, loaded machine runs several times slower."""
    env = server_env()
    cmd = server_command()
    if len(cmd) == 1:
        env["LLADA_LSP"] = cmd[0]
    env.setdefault("npm_config_fund", "false")
    env.setdefault("npm_config_audit", "false")
    with vscode_build_lock():  # the real-VS-Code tests build the same out/ and .vsix
        times: dict[str, float] = {} if installed_matches_lock() else {"ci": npm("ci", timeout=600, env=env)}
        times["build"] = npm("run", "build", timeout=300, env=env)
        times["lint"] = npm("run", "lint", timeout=300, env=env)
        times["test"] = npm("test", timeout=900, env=env)
        assert (VSCODE / "out" / "src" / "extension.js").exists()
    print("vscode: " + ", ".join(f"{k} {v:.1f}s" for k, v in times.items()),
          "(model:", os.environ.get("LLADA_MODEL", env.get("LLADA_MODEL")), ")")
