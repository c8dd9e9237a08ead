"""The guard's window on a large document (`llada_lsp.text.edit_check.windowed`): judged on the
top-level statements around the edit, a suggestion gets the verdict the whole document gives
it, at every place tried (line ends, blank lines, inside blocks, under an unclosed bracket
above), for suggestions that pass and ones that break (an unclosed bracket or string, a
header with no body, an unexpected indent, a stray closer, a dangling `else:`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from llada_lsp.text import edit_check
from llada_lsp.text.edit_check import edit_adds_error, edit_error_spans, windowed
from llada_lsp.text.syntax import parser_for

DATA = Path(__file__).resolve().parents[1] / "data"

PY_SUGGESTIONS = ["x = 1", "    return total", "foo(", "    foo(1)", "def h():", "        y = 2", ")", '"""doc',
                  "else:", "print(x)\n", "    pass", "]", "if x:\n    y = 1", "lambda: (", "0"]
TS_SUGGESTIONS = ["const x = 1;", "foo(", "}", "if (a) {", "return 1;", "let y = [1, 2", "x;", "/* open",
                  "class A {}", "const s = `"]


def _cases(text: str, rows: int = 14) -> list[int]:
    """Cursor offsets spread over the text: line ends and line starts."""
    starts = [0] + [i + 1 for i, ch in enumerate(text) if ch == "\n"]
    picks = [starts[k * (len(starts) - 1) // rows] for k in range(1, rows)]
    return sorted({p for s in picks for p in (s, max(0, text.find("\n", s)))})


def _big(name: str) -> str:
    text = (DATA / name).read_text()
    return text * (edit_check.WINDOW_CHARS // len(text) + 2)


@pytest.mark.parametrize(("language", "name", "suggestions"), [("python", "shapes.py.txt", PY_SUGGESTIONS),
                                                                ("typescript", "queue.ts", TS_SUGGESTIONS)])
def test_the_window_gives_the_whole_documents_verdict(language: str, name: str, suggestions: list[str],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    text = _big(name)
    parser = parser_for(language)
    assert parser is not None
    tree = parser.parse(text.encode())
    checked = windows = 0
    for at in _cases(text):
        before, after = text[:at], text[at:]
        assert windowed(tree, before, "", after)[0] is None  # the window is used: no whole-document tree
        windows += 1
        for s in suggestions:
            win = edit_adds_error(language, tree, before, s, after)
            with monkeypatch.context() as m:
                m.setattr(edit_check, "WINDOW_CHARS", 10**9)  # the whole document
                whole = edit_adds_error(language, tree, before, s, after)
                whole_spans = edit_error_spans(language, tree, before, s, after)
            assert win == whole, (at, s, text[max(0, at - 80):at + 80])
            # the spans to re-mask: found where the whole document finds some (their extent may
            # differ: an open string runs to the window's end, not the file's)
            assert bool(edit_error_spans(language, tree, before, s, after)) == bool(whole_spans), (at, s)
            checked += 1
    assert windows >= 14 and checked >= 14 * len(suggestions)


def test_an_unclosed_bracket_above_the_edit_is_inside_the_window(monkeypatch: pytest.MonkeyPatch) -> None:
    """A file being typed: `total = compute(` left open above the cursor. The old tree's error
    starts the window, so a suggestion is judged with the bracket it runs into."""
    text = _big("shapes.py.txt")
    at = text.index("\n", len(text) // 2) + 1
    text = text[:at] + "total = compute(\n" + text[at:]
    cursor = at + len("total = compute(\n")
    tree = parser_for("python").parse(text.encode())  # type: ignore[union-attr]
    for s in ["1, 2)", "1, 2", "x = 1", "def h():", ")"]:
        win = edit_adds_error("python", tree, text[:cursor], s, text[cursor:])
        with monkeypatch.context() as m:
            m.setattr(edit_check, "WINDOW_CHARS", 10**9)
            whole = edit_adds_error("python", tree, text[:cursor], s, text[cursor:])
        assert win == whole, s
