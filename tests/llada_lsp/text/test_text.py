"""The text group (llada_lsp/text/): positions and the line index, grammars and languages,
documents, their line index and tree edited in place (each checked against a fresh one), and
the parse-error check."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from types import SimpleNamespace as NS
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lsprotocol import types as t

from llada_lsp.text.documents import OFF_LOOP_CHARS, Document, looks_binary
from llada_lsp.text.positions import LineIndex, chars_for_units, units
from llada_lsp.text.syntax import adds_error, grammar, normalize_language

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from bench.keystroke_cost import python_file  # noqa: E402

DATA = Path(__file__).resolve().parents[1] / "data"


# -- positions and grammars ------------------------------------------------------------
def test_units_and_back() -> None:
    s = "a€😀b"  # 1, 3, 4 bytes; 1, 1, 2 UTF-16 units
    assert units(s, "utf-8") == 1 + 3 + 4 + 1
    assert units(s, "utf-16") == 5
    assert units(s, "utf-32") == 4
    assert chars_for_units(s, 4, "utf-8") == 2
    assert chars_for_units(s, 3, "utf-16") == 2  # inside the surrogate pair: its start
    assert chars_for_units(s, 4, "utf-16") == 3
    assert chars_for_units(s, 99, "utf-16") == 4


def test_line_index_clamps_and_crlf() -> None:
    text = "ab\r\ncd😀e\nlast"
    idx = LineIndex.of(text)
    assert idx.line_text(0) == "ab"
    assert idx.offset(0, 99, "utf-16") == 2  # clamped before \r\n
    assert idx.offset(1, 4, "utf-16") == text.index("e")
    assert idx.offset(9, 0, "utf-16") == len(text)
    assert idx.position(text.index("e"), "utf-8") == (1, 6)
    assert idx.is_valid(2, 4, "utf-16") and not idx.is_valid(2, 5, "utf-16")
    assert not idx.is_valid(3, 0, "utf-16")


@pytest.mark.parametrize("lid", ["python", "javascript", "typescript", "typescriptreact", "go",
                                 "rust", "java", "c", "cpp", "lua"])
def test_grammars_load(lid: str) -> None:
    assert grammar(lid) is not None


def test_language_from_extension() -> None:
    assert normalize_language("plaintext", "file:///a/b.rs") == "rust"
    assert normalize_language("", "file:///a/b.tsx") == "typescriptreact"
    assert normalize_language("cobol", "file:///a/b.cbl") == "cobol"


# -- documents -------------------------------------------------------------------------
def test_incremental_tree_matches_full_parse() -> None:
    text = (DATA / "shapes.py.txt").read_text()
    doc = Document("file:///s.py", "python", 1, text, 10**6)
    doc.syntax_tree()
    i = text.index("    return Point(0.0, 0.0)")
    for ch in "    n = len(points)\n":  # type it character by character
        line, col = doc.index.position(i, "utf-16")
        rng = t.Range(t.Position(line, col), t.Position(line, col))
        doc.apply_change(t.TextDocumentContentChangePartial(range=rng, text=ch), "utf-16")
        i += 1
    # and delete a range spanning lines
    start = doc.text.index("def scale")
    a, b = doc.index.position(start, "utf-16"), doc.index.position(start + 30, "utf-16")
    doc.apply_change(t.TextDocumentContentChangePartial(
        range=t.Range(t.Position(*a), t.Position(*b)), text="def zoom("), "utf-16")
    inc = doc.syntax_tree()
    full = grammar("python") and Document("file:///t.py", "python", 1, doc.text, 10**6)
    assert full is not None
    assert str(inc.root_node) == str(full.syntax_tree().root_node)
    assert "n = len(points)" in doc.text and "def zoom(" in doc.text


@pytest.mark.parametrize("parsed_first", [False, True])
async def test_a_parse_off_the_loop_keeps_the_edits_made_meanwhile(parsed_first: bool) -> None:
    """`Document.parsed` parses a large document on a thread; edits applied on the loop while
    it runs (typed character by character, and a deletion across lines) are applied to its
    tree when it is taken: the tree then equals a fresh parse of the text."""
    text = (DATA / "shapes.py.txt").read_text()
    big = text * (OFF_LOOP_CHARS // len(text) + 1)
    doc = Document("file:///s.py", "python", 1, big, 10**7)
    if parsed_first:  # a reparse (incremental from the edited tree), not the first parse
        doc.syntax_tree()
        doc.apply_change(t.TextDocumentContentChangePartial(range=t.Range(t.Position(0, 0), t.Position(0, 0)),
                                                            text="import os\n"), "utf-16")
    running = asyncio.ensure_future(doc.parsed())
    await asyncio.sleep(0)  # the thread's parse has started (its job is set)
    assert doc.tree is not None and doc.tree.job is not None
    i = doc.text.index("    return Point(0.0, 0.0)")
    for ch in "    n = len(points)\n":
        line, col = doc.index.position(i, "utf-16")
        doc.apply_change(t.TextDocumentContentChangePartial(range=t.Range(t.Position(line, col), t.Position(line, col)),
                                                            text=ch), "utf-16")
        i += 1
    start = doc.text.index("def scale")
    a, b = doc.index.position(start, "utf-16"), doc.index.position(start + 30, "utf-16")
    doc.apply_change(t.TextDocumentContentChangePartial(range=t.Range(t.Position(*a), t.Position(*b)),
                                                        text="def zoom("), "utf-16")
    await running
    assert doc.tree.job is None and doc.tree.pending is None and doc.tree.dirty  # the edits wait for a reparse
    fresh = Document("file:///t.py", "python", 1, doc.text, 10**7)
    assert str(doc.syntax_tree().root_node) == str(fresh.syntax_tree().root_node)
    await doc.parsed()  # current now: nothing to do
    assert not doc.tree.dirty


def test_a_replaced_copy_edits_its_own_tree_and_leaves_the_document() -> None:
    text = (DATA / "shapes.py.txt").read_text()
    doc = Document("file:///s.py", "python", 7, text, 10**6)
    before = str(doc.syntax_tree().root_node)
    i = text.index("return total")
    copy = doc.replaced(i, i + 3, "raise ValueError(total)\n    ")  # spans a new line
    assert copy.text == text[:i] + "raise ValueError(total)\n    " + text[i + 3:]
    assert (copy.uri, copy.version, copy.language_id) == (doc.uri, 7, "python")
    full = Document("file:///t.py", "python", 1, copy.text, 10**6)
    assert str(copy.syntax_tree().root_node) == str(full.syntax_tree().root_node)
    assert doc.text == text and str(doc.syntax_tree().root_node) == before
    assert Document("file:///x.cbl", "cobol", 1, "x", 10).replaced(0, 1, "yz").text == "yz"


def test_binary_and_large_documents() -> None:
    assert looks_binary("abc\x00def")
    assert not looks_binary("plain\ttext\n")
    doc = Document("file:///big.py", "python", 1, "x = 1\n" * 200_000, 1_000_000)
    assert doc.too_large and doc.tree is None and doc.unservable_reason()


def test_adds_error() -> None:
    before, after = "def f(x):\n    ", "\n\nprint(1)\n"
    assert not adds_error("python", None, before, "return x + 1", after)
    assert adds_error("python", None, before, "return (x +", after)


# -- edited in place, against a fresh one ----------------------------------------------
def change(doc: Document, start: int, end: int, text: str) -> None:
    (sl, sc), (el, ec) = doc.index.position(start, "utf-16"), doc.index.position(end, "utf-16")
    doc.apply_change(NS(range=NS(start=NS(line=sl, character=sc), end=NS(line=el, character=ec)),
                        text=text), "utf-16")


edits = st.lists(st.tuples(st.integers(0, 400), st.integers(0, 6),
                           st.text(alphabet="ab\n\r😀é ", max_size=5)), max_size=25)


@settings(max_examples=150, deadline=None)
@given(st.text(alphabet="xy\n\r😀 ", max_size=60), edits)
def test_the_line_index_edited_in_place_matches_a_fresh_one(text: str, steps: list[Any]) -> None:
    doc = Document("file:///p.txt", "plaintext", 1, text, 10**6)
    index = doc.index
    for at, n, fragment in steps:
        start = min(at, len(doc.text))
        change(doc, start, min(start + n, len(doc.text)), fragment)
        assert doc.index is index  # edited, not rebuilt
        fresh = LineIndex.of(doc.text)
        assert [index.start(i) for i in range(index.line_count)] == fresh.starts
        for off in range(0, len(doc.text) + 1, 3):
            assert index.position(off, "utf-16") == fresh.position(off, "utf-16")
    assert index.starts == LineIndex.of(doc.text).starts


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2000), st.integers(0, 3),
                          st.sampled_from(["x", "\n", "    ", "):", "é", "\n    if a:\n"])),
                min_size=1, max_size=8))
def test_the_tree_edited_incrementally_matches_a_fresh_parse(steps: list[Any]) -> None:
    text = python_file(120).replace("Doc 3.", "Doc é 😀.")
    doc = Document("file:///t.py", "python", 1, text, 10**6)
    doc.syntax_tree()
    for at, n, fragment in steps:
        start = min(at, len(doc.text))
        change(doc, start, min(start + n, len(doc.text)), fragment)
        fresh = Document("file:///f.py", "python", 1, doc.text, 10**6).syntax_tree()
        assert str(doc.syntax_tree().root_node) == str(fresh.root_node)


def test_a_same_version_change_is_a_new_revision() -> None:
    doc = Document("file:///r.py", "python", 3, "x = 1\n", 10**6)
    doc.apply_change(NS(text="x = 1\n"), "utf-16")  # the same text: the same content
    assert doc.revision == 0
    doc.apply_change(NS(text="x = 2\n"), "utf-16")
    change(doc, 0, 0, "#")
    assert doc.revision == 2 and doc.version == 3
