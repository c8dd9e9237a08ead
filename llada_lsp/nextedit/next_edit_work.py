"""The worker's half of `llada/nextEdit` (`llada_lsp.nextedit.next_edit`): what parses or walks
a tree runs here, in the worker process (`llada_lsp.nextedit.edit_worker`), on the texts the
loop sent, under the request's `Guard` (`llada_lsp.nextedit.edit_limits`: bounded, cancelled
by a newer request or an edit).

- `analyse`: the text's tree (incrementally from the document's edited tree when the loop has
  not parsed it yet), the base's tree only when the analysis asks for it, the analysis, the
  error counts.
- `checked`: the suggestions of the analysis and the fills, `edit_window.keep`, and their wire
  form (positions from a line index of the snapshot's text, not the document's, which the loop
  edits meanwhile).
- `typing_word`: whether a request comes while a word is being typed (the service then waits
  `TYPING_HOLD_S` after the last change).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import tree_sitter as ts

from llada_lsp.nextedit.edit_analysis import Analysis, analyze, common_ends
from llada_lsp.nextedit.edit_limits import Guard, parse
from llada_lsp.nextedit.edit_window import Suggested, keep, lsp_suggestion, site_suggestions
from llada_lsp.text.documents import Document
from llada_lsp.text.positions import Encoding, LineIndex
from llada_lsp.text.syntax import count_errors, parser_for


@dataclass
class Base:
    """The text before the edit being made; its tree and parse errors once known (the loop
    copies the document's tree when it is current, else the worker parses the text)."""

    text: str
    tree: ts.Tree | None = None
    errors: int | None = None

    def parsed(self, language: str, guard: Guard | None) -> ts.Tree:
        if self.tree is None:
            parser = parser_for(language)
            assert parser is not None  # a request reaches the worker only for a grammar's language
            self.tree = parse(parser, self.text.encode("utf-8", "surrogatepass"), None, guard)
        return self.tree

    def error_count(self, language: str, guard: Guard | None) -> int:
        if self.errors is None:
            self.errors = count_errors(self.parsed(language, guard).root_node)
        return self.errors


@dataclass(frozen=True)
class Snapshot:
    """A document as the loop saw it at the request: its text and a copy of its tree (`stale`:
    edited since its last parse, or None: never parsed)."""

    language: str
    text: str
    version: int | None
    revision: int
    tree: ts.Tree | None
    stale: bool

    @classmethod
    def of(cls, doc: Document) -> Snapshot:
        st = doc.tree
        tree = st.tree.copy() if st is not None and st.tree is not None else None
        return cls(doc.language_id, doc.text, doc.version, doc.revision, tree, st is None or st.dirty)


def base_of(doc: Document) -> Base:
    """The document before an edit: its text (the worker process keeps the trees, no parse
    or walk here on the loop)."""
    return Base(doc.text)


@dataclass
class Analysed:
    analysis: Analysis
    tree: ts.Tree
    errors: int
    settles: bool = False  # nothing follows and no more parse errors than the base: the base moves here


def analyse(snap: Snapshot, base: Base, guard: Guard) -> Analysed:
    """The analysis of the edit; a refused one (a limit hit) does not settle (the base's tree
    is not parsed for it)."""
    tree = snap.tree
    if tree is None or snap.stale:
        parser = parser_for(snap.language)
        assert parser is not None
        tree = parse(parser, snap.text.encode("utf-8", "surrogatepass"), tree, guard)
    analysis = analyze(snap.language, base.text, snap.text, lambda: old_around(snap, base, tree, guard), tree, guard)
    got = Analysed(analysis, tree, count_errors(tree.root_node))
    if not analysis.sites and not analysis.limit:
        got.settles = got.errors <= base.error_count(snap.language, guard)
    return got


def old_around(snap: Snapshot, base: Base, tree: ts.Tree, guard: Guard) -> ts.Tree:
    """The base's tree when the loop had it; else a parse of only the top-level statement around
    the edit (tree-sitter's included ranges: its nodes keep their offsets in the whole text),
    all the parameter, field and return analyses read of it; the whole base when the edit
    crosses statements."""
    if base.tree is not None:
        return base.tree
    p, s = common_ends(base.text, snap.text)
    new_data, old_data = snap.text.encode("utf-8", "surrogatepass"), base.text.encode("utf-8", "surrogatepass")
    pb, sb = len(snap.text[:p].encode("utf-8", "surrogatepass")), len(snap.text[len(snap.text) - s:].encode(
        "utf-8", "surrogatepass"))
    cursor = tree.root_node.walk()
    top = cursor.node if cursor.goto_first_child_for_byte(pb) is not None else None
    if top is None or not (top.start_byte <= pb and len(new_data) - sb <= top.end_byte):
        return base.parsed(snap.language, guard)
    a, b = top.start_byte, top.end_byte - (len(new_data) - len(old_data))
    parser = parser_for(snap.language)
    assert parser is not None
    parser.included_ranges = [ts.Range(_point(old_data, a), _point(old_data, b), a, b)]
    return parse(parser, old_data, None, guard)


def _point(data: bytes, b: int) -> tuple[int, int]:
    return data.count(b"\n", 0, b), b - (data.rfind(b"\n", 0, b) + 1)


def checked(snap: Snapshot, base: Base, got: Analysed, fills: list[Suggested | None], placeholders: bool,
            kept: tuple[int, int], enc: Encoding, guard: Guard) -> list[dict[str, Any]]:
    """The suggestions that pass `keep`, in wire form; none at all settles `got` as `analyse` does."""
    found, holders = site_suggestions(got.analysis.sites, fills, placeholders)
    index = LineIndex.of(snap.text)
    out = keep(snap.language, snap.text, index, found, kept, got.errors, got.tree, holders, guard)
    if not out:
        got.settles = got.errors <= base.error_count(snap.language, guard)
    wire = []
    for s in out:
        guard.check()
        wire.append(lsp_suggestion(snap.text, index, s, enc))
    return wire


# A request whose cursor is in (or at the end of) a word the edit changed comes while the word
# may still be typed (a pause mid-word outlasts the clients' 300 ms debounce): it is answered
# only once the document has not changed for this long; the next edit cancels it before then
# (`document changed`), so a half-typed name (`ent` for `entry`) is not shown at a short pause.
TYPING_HOLD_S = 1.0


def typing_word(text: str, cursor: int, edited: tuple[int, int], removed: str = "") -> bool:
    """Whether the cursor is in or right after a word that the edit is typing: characters
    inserted into it, or a word character deleted from it (`removed`: the text the edit took
    out; `, b` deleted after `a` is no typing of `a`)."""
    a = cursor
    while a > 0 and (text[a - 1].isalnum() or text[a - 1] in "_$"):
        a -= 1
    if a == cursor:
        return False  # no word ends at the cursor: the user has left it
    b = cursor
    while b < len(text) and (text[b].isalnum() or text[b] in "_$"):
        b += 1
    if edited[1] > edited[0]:
        return edited[0] < b and edited[1] > a
    return a <= edited[0] <= b and (removed[:1].isalnum() or removed[:1] in ("_", "$"))
