"""Trim a document's prefix and suffix to the context budget by syntactic units.

The window before the cursor starts at a statement boundary (a line where a unit of the
syntax tree starts, or, without a tree, a line indented no deeper than the cursor's line).
Imports and the header lines of the enclosing scopes that fall outside the window are kept
in front of it. The window's start is quantized (`slack`), so that while the user types it
stays put and the engine's prompt cache keeps matching.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from llada_lsp.text.positions import LineIndex, byte_offset
from llada_lsp.text.syntax import IMPORT_TYPES, ancestors, node_at

_IMPORT_LINE = re.compile(
    r"^(import\s|from\s+\S+\s+import\s|#\s*include\b|use\s|package\s|using\s|"
    r"extern\s+crate\s|local\s+\w+\s*=\s*require\b|require\b)")


MAX_TOP_NODES = 400  # top-level nodes searched for imports

@dataclass(frozen=True)
class Context:
    prefix: str
    suffix: str
    window_start: int  # document offset where the prefix's verbatim window starts
    suffix_end: int  # document offset where the suffix ends
    kept: str  # imports and headers placed in front of the window ("" if none)


def indentation(line: str) -> str:
    return line[: len(line) - len(line.lstrip(" \t"))]


def _boundaries_from_tree(tree: Any, text: str, offset: int, index: LineIndex,
                          limit: int) -> list[int]:
    """Line starts in [limit, offset] where a unit of the tree starts or after one ends: the
    children of the cursor's node and of its ancestors that reach into the window, found
    by descending from the cursor (a tree cursor from the first child at the window's
    start), never by walking every child of a scope."""
    lo_row = max(0, index.line_of(max(0, min(limit, offset))) - 1)
    lo_byte = max(0, byte_offset(text, index.start(lo_row)) - 1)
    hi_byte = byte_offset(text, offset)
    rows: set[int] = set()
    node = node_at(tree, text, offset)
    for anc in [node, *ancestors(node)]:
        for child in _children_from(anc, lo_byte):
            if child.start_byte > hi_byte:
                break
            if child.is_named:
                rows.add(child.start_point[0])
                rows.add(child.end_point[0] + 1)
    return sorted(index.start(r) for r in rows if r < index.line_count)


def _children_from(node: Any, byte: int = 0) -> Iterator[Any]:
    """The children of `node` from the first that ends after `byte` on (a tree cursor:
    O(1) a step, where `next_sibling` may rescan the parent)."""
    cursor = node.walk()
    if (cursor.goto_first_child() if byte <= node.start_byte
            else cursor.goto_first_child_for_byte(byte) is not None):
        yield cursor.node
        while cursor.goto_next_sibling():
            yield cursor.node


def _boundaries_from_indent(offset: int, index: LineIndex, limit: int) -> list[int]:
    line, _ = index.position(offset, "utf-32")
    cur_indent = len(indentation(index.line_text(line)))
    out = []
    for r in range(index.position(max(limit, 0), "utf-32")[0], line + 1):
        lt = index.line_text(r)
        if lt.strip() and len(indentation(lt)) <= cur_indent:
            out.append(index.start(r))
    return out


def _headers(tree: Any, text: str, offset: int, index: LineIndex, window_start: int) -> list[int]:
    """Rows of the enclosing scopes' first lines that lie before the window."""
    wrow = index.position(window_start, "utf-32")[0]
    rows: set[int] = set()
    if tree is not None:
        for anc in ancestors(node_at(tree, text, offset)):
            r = anc.start_point[0]
            if anc.parent is not None and r < wrow:
                rows.add(r)
    else:
        limit = len(indentation(index.line_text(wrow))) if wrow < index.line_count else 0
        for r in range(wrow - 1, -1, -1):
            lt = index.line_text(r)
            if not lt.strip():
                continue
            ind = len(indentation(lt))
            if ind < limit:
                rows.add(r)
                limit = ind
            if limit == 0:
                break
    return sorted(rows)


def _imports(tree: Any, text: str, index: LineIndex, window_start: int) -> Iterator[str]:
    """The imports before the window, in order: top-level import nodes among the first
    `MAX_TOP_NODES` top-level nodes (imports head a file), or import-looking lines."""
    if tree is not None:
        data = None if text.isascii() else text.encode("utf-8", "surrogatepass")
        size = len(text) if data is None else len(data)
        for i, child in enumerate(_children_from(tree.root_node)):
            if i >= MAX_TOP_NODES or child.end_byte > size or \
                    index.start(min(child.end_point[0], index.line_count - 1)) >= window_start:
                return
            if child.type in IMPORT_TYPES:
                yield text[child.start_byte: child.end_byte] if data is None else \
                    data[child.start_byte: child.end_byte].decode("utf-8", "replace")
        return
    for r in range(index.line_of(window_start)):
        lt = index.line_text(r)
        if _IMPORT_LINE.match(lt):
            yield lt


def trim_context(text: str, offset: int, *, index: LineIndex | None = None, tree: Any = None,
                 prefix_chars: int = 3000, suffix_chars: int = 1000, kept_chars: int = 600,
                 slack: int = 256) -> Context:
    index = index or LineIndex.of(text)
    suffix_end = len(text)
    if len(text) - offset > suffix_chars:
        limit = offset + suffix_chars
        line = index.position(limit, "utf-32")[0]
        suffix_end = max(index.start(line), offset)
        cur_line = index.position(offset, "utf-32")[0]
        if line > cur_line + 1:  # prefer a line at the cursor's level or outer
            cur_indent = len(indentation(index.line_text(cur_line)))
            for r in range(line, cur_line, -1):
                lt = index.line_text(r)
                if lt.strip() and len(indentation(lt)) <= cur_indent:
                    suffix_end = index.start(r)
                    break
    suffix = text[offset:suffix_end]
    if offset <= prefix_chars:
        return Context(text[:offset], suffix, 0, suffix_end, "")

    budget = prefix_chars - kept_chars
    limit = -(-(offset - budget) // slack) * slack  # ceil to a multiple of slack
    bounds = _boundaries_from_tree(tree, text, offset, index, limit) if tree is not None \
        else _boundaries_from_indent(offset, index, limit)
    start = next((b for b in bounds if limit <= b <= offset), None)
    if start is None:  # the cursor's unit alone is over budget: cut at a line start
        line = index.position(min(limit, offset), "utf-32")[0]
        start = index.start(line) if index.start(line) >= limit else \
            index.start(min(line + 1, index.line_count - 1))
        start = min(start, offset)
    kept_parts: list[str] = []
    used = 0
    for piece in _imports(tree, text, index, start):
        if used + len(piece) + 1 > kept_chars:
            break
        kept_parts.append(piece)
        used += len(piece) + 1
    header_parts: list[str] = []
    for r in reversed(_headers(tree, text, offset, index, start)):  # innermost first
        lt = index.line_text(r)
        if used + len(lt) + 1 > kept_chars:
            break
        header_parts.insert(0, lt)
        used += len(lt) + 1
    kept = "".join(p + "\n" for p in kept_parts + header_parts)
    return Context(kept + text[start:offset], suffix, start, suffix_end, kept)
