"""The type checker stays clean: `mypy llada_lsp engine kernels bench` from the repository root
(config: pyproject.toml's [tool.mypy]) reports no error. mypy runs in a subprocess with its cache
in this test's own temporary directory, so a clean clone and parallel workers do not share one;
a cold run takes about a minute on two cores."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("llada_lsp", "engine", "kernels", "bench")


@pytest.mark.timeout(900)  # a cold check under a loaded two-core suite; the default 300 s is tight
def test_mypy_reports_no_error(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
           "--cache-dir", str(tmp_path / "mypy_cache"), *PACKAGES]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=840)
    assert done.returncode == 0, f"{' '.join(cmd[1:])} failed:\n{done.stdout}{done.stderr}"
