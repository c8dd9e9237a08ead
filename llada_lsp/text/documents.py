"""Open documents: text, version, language, incremental changes, and the syntax tree.

The store applies LSP content changes itself (so it knows each edit's old range and can
edit the tree-sitter tree before the text changes). Each change updates the line index in
place and records the edit in the tree (reparsed lazily, incrementally, when a request needs
it), so a keystroke costs no pass over the whole document beyond the string copy.

`revision` counts the changes that altered the text: with the version it fingerprints the
content a request was computed on (a client may send a change without a new version).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any

from llada_lsp.text.positions import Encoding, LineIndex, PositionError
from llada_lsp.text.syntax import SyntaxTree, normalize_language

log = logging.getLogger(__name__)

OFF_LOOP_CHARS = 100_000  # a document this large is parsed on a thread before a completion reads its tree


class DocumentError(ValueError):
    """A request names a document or version the server cannot serve."""


def looks_binary(text: str) -> bool:
    """NUL characters or many control characters in the first 8 KiB."""
    head = text[:8192]
    if "\x00" in head:
        return True
    ctrl = sum(1 for ch in head if ord(ch) < 32 and ch not in "\t\n\r\f\v")
    return ctrl > max(8, len(head) // 50)


@dataclass
class Document:
    uri: str
    language_id: str
    version: int
    text: str
    max_bytes: int
    tree: SyntaxTree | None = None
    revision: int = 0  # bumped by every change that alters the text
    _index: LineIndex | None = field(default=None, repr=False)
    _binary: tuple[int, bool] | None = field(default=None, repr=False)  # (revision, looks_binary)

    def __post_init__(self) -> None:
        self.language_id = normalize_language(self.language_id, self.uri)
        self._reset_tree()

    @property
    def too_large(self) -> bool:
        return len(self.text) > self.max_bytes  # characters >= bytes/4: cheap upper check

    @property
    def binary(self) -> bool:
        if self._binary is None or self._binary[0] != self.revision:
            self._binary = (self.revision, looks_binary(self.text))
        return self._binary[1]

    def unservable_reason(self) -> str | None:
        if self.too_large:
            return f"document is larger than max_file_bytes ({self.max_bytes})"
        if self.binary:
            return "document looks binary"
        return None

    # -- the checks every request at a position makes (completions and next edits) -------------
    def request_offset(self, line: int, character: int, encoding: Encoding) -> int:
        """The offset of a request's position; one past the end is the client's error
        (`PositionError`: Invalid Params)."""
        if not self.index.is_valid(line, character, encoding):
            raise PositionError(f"position {line}:{character} is past the end of {self.uri} "
                                f"({self.index.line_count} lines)")
        return self.index.offset(line, character, encoding)

    def refusal(self, language_enabled: bool) -> str | None:
        """Why a request here gets nothing (its language is off, the document is too large
        or binary), or None: the one check of a completion and a next edit."""
        if not language_enabled:
            return "language disabled"
        return self.unservable_reason()

    def _reset_tree(self) -> None:
        self.tree = None
        if self.unservable_reason() is None:
            self.tree = SyntaxTree.create(self.language_id, self.text)

    @property
    def index(self) -> LineIndex:
        if self._index is None or self._index.text is not self.text:
            self._index = LineIndex.of(self.text)
        return self._index

    def offset_at(self, line: int, character: int, encoding: Encoding) -> int:
        return self.index.offset(line, character, encoding)

    def apply_change(self, change: Any, encoding: Encoding) -> None:
        """One TextDocumentContentChangeEvent (incremental with `range`, or whole text)."""
        rng = getattr(change, "range", None)
        new_text: str = change.text
        if rng is None:
            if new_text != self.text:
                self.revision += 1
            self.text = new_text
            self._index = None
            self._reset_tree()
            return
        start = self.offset_at(rng.start.line, rng.start.character, encoding)
        end = self.offset_at(rng.end.line, rng.end.character, encoding)
        if end < start:
            start, end = end, start
        old = self.text
        if old[start:end] == new_text:
            return  # nothing changes (not even the revision)
        index = self.index
        if self.tree is not None:
            self.tree.edit(old, start, end, new_text, index)
        self.text = old[:start] + new_text + old[end:]
        index.edit(start, end, new_text, self.text)
        self.revision += 1
        if self.tree is None and self.unservable_reason() is None:
            self._reset_tree()
        elif self.tree is not None and self.too_large:
            self.tree = None

    def replaced(self, start: int, end: int, fragment: str) -> Document:
        """A copy with text[start:end] replaced by `fragment` (string offsets): the document
        the editor would hold if the item selected in its completion widget were accepted.
        Same uri, language and version; its tree is this one's, edited incrementally."""
        text = self.text[:start] + fragment + self.text[end:]
        copy = Document(self.uri, self.language_id, self.version, text, self.max_bytes,
                        revision=self.revision)
        if self.tree is not None and copy.tree is not None:
            base = self.syntax_tree()
            st = SyntaxTree(self.language_id, self.tree.parser, base.copy(), False, self.tree.data)
            st.edit(self.text, start, end, fragment)
            copy.tree = st
        return copy

    async def parsed(self) -> None:
        """The tree of a document of `OFF_LOOP_CHARS` or more brought up to date on a thread
        (`SyntaxTree.parse_job`) while the event loop serves other requests, so that
        `syntax_tree` then costs the loop little: its first parse, or a reparse, never holds
        the loop whole. One parse at a time per document (a second caller waits for the
        first's)."""
        st = self.tree
        if st is None or not st.dirty or (st.job is None and len(self.text) < OFF_LOOP_CHARS):
            return  # a small document's reparse stays on the loop (`syntax_tree`): no thread hop
        if st.job is None:
            data, work = st.parse_job(self.text)

            async def run() -> None:
                try:
                    tree = await asyncio.to_thread(work)
                except BaseException:
                    st.pending = None
                    raise
                finally:
                    st.job = None
                st.take(data, tree)
            st.job = asyncio.ensure_future(run())
        await asyncio.shield(st.job)

    def syntax_tree(self) -> Any:
        """The current tree-sitter Tree, or None (no grammar, too large, binary)."""
        if self.tree is None:
            return None
        return self.tree.current(self.text)


class DocumentStore:
    def __init__(self, max_bytes: int = 1_000_000) -> None:
        self.max_bytes = max_bytes
        self.docs: dict[str, Document] = {}

    def open(self, uri: str, language_id: str, version: int, text: str) -> Document:
        doc = Document(uri, language_id, version, text, self.max_bytes)
        doc.index  # noqa: B018 - built with the open (its own pass over the text), not at the first keystroke
        self.docs[uri] = doc
        return doc

    def change(self, uri: str, version: int, changes: list[Any], encoding: Encoding) -> Document:
        doc = self.get(uri)
        for change in changes:
            doc.apply_change(change, encoding)
        doc.version = version
        return doc

    def close(self, uri: str) -> None:
        self.docs.pop(uri, None)

    def get(self, uri: str) -> Document:
        doc = self.docs.get(uri)
        if doc is None:
            raise DocumentError(f"unknown document {uri!r} (not opened with didOpen)")
        return doc
