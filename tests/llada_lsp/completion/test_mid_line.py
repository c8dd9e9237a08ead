"""Suggestions in the middle of a line: the item replaces the rest of the line it overlaps.

The pure rule (llada_lsp.completion.line_rest) on fixed cases, then the real server over stdio: every
item made at a cursor with code after it has a range from the cursor to the line's end and an
insert text that ends with the part of the rest it keeps, and so do its refinements; accepting
it (replacing the range) gives the line the editor showed.
"""

from __future__ import annotations

from typing import Any

import pytest
from lsprotocol import types as t

from llada_lsp.completion.line_rest import (
    fit,
    kept_rest,
    only_deletes,
    rest_of_line,
    unmatched_closers,
    wraps,
)
from tests.llada_lsp.lsp_helpers import (
    DATA,
    completion_id,
    final_refine,
    inline,
    item_texts,
    needs_model,
    open_doc,
    session_fixture,
)

INIT = {"maxTokens": {"line": 12, "statements": 16, "block": 24}}
client = session_fixture(INIT)


@pytest.mark.parametrize("text,rest,kept", [
    ("_argv[0])", "argv[1])", ""),           # closes the call the rest closes: replaces it
    ("x, y)", ")", ""),                     # restates the closer the rest has
    ("x", ")", ")"),                        # an insertion keeps the whole rest
    ("a), b)", "c)) + 1", " + 1"),           # two closers: up to the rest's second one
    ("f(x)", "argv[1])", "argv[1])"),       # balanced: an insertion
    ("')'", "y)", "y)"),                     # a quoted closer closes nothing
    ("z]", "x)", "x)"),                      # the rest closes another kind: an insertion
])
def test_kept_rest(text: str, rest: str, kept: str) -> None:
    assert kept_rest(text, rest) == kept
    assert fit(text, rest) == text + kept
    assert fit(text, "") == text


def test_closers_before_a_balanced_rest_close_after_it() -> None:
    """Issue 51 item 2: `max(` typed before `area(5, 6)` and the model closes the call."""
    assert wraps(")", "area(5, 6)") and fit(")", "area(5, 6)") == "area(5, 6))"
    assert fit("))", "x  ") == "x))  "  # trailing blanks stay after the closers
    assert not only_deletes(")", "area(5, 6)")
    assert not wraps(")", "argv[1])") and not wraps("x)", "area(5, 6)") and not wraps(")", "f(x")
    assert not wraps(")", "") and not wraps(" )", "x")


def test_rest_of_line_and_closers() -> None:
    src = "inv = load_inventory(sys.argv[1])  \nnext"
    at = src.index("argv")
    assert rest_of_line(src, at) == "argv[1])  "
    assert rest_of_line(src, src.index("  \n")) == ""  # blank: nothing to replace
    assert rest_of_line("x = 1", 5) == ""
    assert unmatched_closers("a(b)c)]") == [5, 6]
    # ")" before "argv[1])" would only delete "argv[1]": not offered
    assert only_deletes(")", "argv[1])") and only_deletes(" )", "x)")
    assert not only_deletes("x)", "argv[1])") and not only_deletes(")", "") and not only_deletes("", ")")


def _shapes_spots() -> list[tuple[str, int, int]]:
    """(document, line, character): the cursor before the last call argument of each line
    `name = call(arg)`, with `arg` still there after it."""
    src = (DATA / "shapes.py.txt").read_text()
    lines = src.split("\n")
    out = []
    for k, ln in enumerate(lines):
        if "(" in ln and ln.rstrip().endswith(")") and not ln.lstrip().startswith(("def ", "class ", "#")):
            out.append((src, k, ln.rindex("(") + 1))
    return out


def _replace(line: str, start: int, end: int, text: str) -> str:
    return line[:start] + text + line[end:]


@pytest.mark.asyncio(loop_scope="module")
@needs_model
async def test_mid_line_items_replace_the_rest_they_overlap(client: Any) -> None:
    checked = 0
    for n, (src, k, col) in enumerate(_shapes_spots()[:8]):
        uri = open_doc(client, "shapes.py.txt", "python", uri=(DATA / f"mid{n}.py").as_uri(), text=src)
        line = src.split("\n")[k]
        rest = line[col:]
        res = await inline(client, uri, t.Position(k, col), invoked=True)
        texts = item_texts(res)
        if not texts:
            continue
        assert res is not None
        for item, text in zip(res.items, texts, strict=True):
            assert item.range is not None
            assert (item.range.start.line, item.range.start.character) == (k, col)
            assert (item.range.end.line, item.range.end.character) == (k, len(line))
            # text = suggestion + the part of the rest it keeps
            kept = next(kept for i in range(len(text) + 1)
                        if text[i:] == (kept := kept_rest(text[:i], rest)))
            assert rest.endswith(kept)
            assert not only_deletes(text[: len(text) - len(kept)], rest)  # it adds something
            accepted = _replace(line, col, len(line), text)
            assert accepted.endswith(kept) and accepted.startswith(line[:col])
        cid = completion_id(res)
        assert cid is not None
        final = await final_refine(client, cid)
        body = final["text"]
        assert any(body[i:] == kept_rest(body[:i], rest) for i in range(len(body) + 1)), (body, rest)
        checked += 1
    assert checked, "the model suggested nothing at any mid-line spot"
