"""tree-sitter adapter: grammars by language, incrementally edited trees, error checks.

Everything tree-sitter-specific lives here; the rest of the server asks questions
(`node kind at the cursor`, `does this text add a parse error`) in string offsets.
"""

from __future__ import annotations

import importlib
import logging
import re
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import tree_sitter as ts

from llada_lsp.text.positions import LineIndex, byte_offset, byte_point

log = logging.getLogger(__name__)

# languageId (LSP) -> (grammar module, function)
_GRAMMARS: dict[str, tuple[str, str]] = {
    "python": ("tree_sitter_python", "language"),
    "javascript": ("tree_sitter_javascript", "language"),
    "javascriptreact": ("tree_sitter_javascript", "language"),
    "typescript": ("tree_sitter_typescript", "language_typescript"),
    "typescriptreact": ("tree_sitter_typescript", "language_tsx"),
    "go": ("tree_sitter_go", "language"),
    "rust": ("tree_sitter_rust", "language"),
    "java": ("tree_sitter_java", "language"),
    "c": ("tree_sitter_c", "language"),
    "cpp": ("tree_sitter_cpp", "language"),
    "lua": ("tree_sitter_lua", "language"),
}

_EXTENSIONS: dict[str, str] = {
    ".py": "python", ".pyi": "python", ".js": "javascript", ".mjs": "javascript",
    ".cjs": "javascript", ".jsx": "javascriptreact", ".ts": "typescript", ".mts": "typescript",
    ".cts": "typescript", ".tsx": "typescriptreact", ".go": "go", ".rs": "rust",
    ".java": "java", ".c": "c", ".h": "c", ".cc": "cpp", ".cpp": "cpp", ".cxx": "cpp",
    ".hpp": "cpp", ".hh": "cpp", ".lua": "lua",
}

# Languages whose blocks are delimited by braces (others by indentation or keywords).
BRACE_LANGUAGES = frozenset(
    {"javascript", "javascriptreact", "typescript", "typescriptreact", "go", "rust", "java",
     "c", "cpp"})

# Top-level node types kept when the prefix is trimmed (imports and the like).
IMPORT_TYPES = frozenset({
    "import_statement", "import_from_statement", "future_import_statement",
    "import_declaration", "package_clause", "use_declaration", "extern_crate_declaration",
    "preproc_include", "package_declaration", "using_declaration",
})


def normalize_language(language_id: str, uri: str = "") -> str:
    """The LSP languageId, or one guessed from the file extension when the client's id is
    unknown to us ("plaintext", ""...)."""
    lid = (language_id or "").lower()
    aliases = {"py": "python", "js": "javascript", "ts": "typescript", "tsx": "typescriptreact",
               "jsx": "javascriptreact", "c++": "cpp", "golang": "go", "rs": "rust"}
    lid = aliases.get(lid, lid)
    if lid in _GRAMMARS:
        return lid
    dot = uri.rfind(".")
    if dot >= 0 and "/" not in uri[dot:]:
        return _EXTENSIONS.get(uri[dot:].lower(), lid)
    return lid


@cache
def grammar(language_id: str) -> ts.Language | None:
    """The tree-sitter Language for a languageId, or None (no wheel or unknown language)."""
    spec = _GRAMMARS.get(language_id)
    if spec is None:
        return None
    try:
        module = importlib.import_module(spec[0])
        return ts.Language(getattr(module, spec[1])())
    except (ImportError, AttributeError, ValueError) as e:
        log.warning("no tree-sitter grammar for %s: %s", language_id, e)
        return None


def parser_for(language_id: str) -> ts.Parser | None:
    lang = grammar(language_id)
    return ts.Parser(lang) if lang is not None else None


def count_errors(node: ts.Node, limit: int = 1000) -> int:
    """ERROR and MISSING nodes under `node` (descends only into subtrees with errors)."""
    if not node.has_error and not node.is_missing:
        return 0
    n = 0
    stack = [node]
    while stack and n < limit:
        cur = stack.pop()
        if cur.is_error or cur.is_missing:
            n += 1
            continue
        stack.extend(c for c in cur.children if c.has_error or c.is_missing)
    return n


@dataclass
class SyntaxTree:
    """One document's tree, edited incrementally and reparsed lazily."""

    language_id: str
    parser: ts.Parser
    tree: ts.Tree | None = None
    dirty: bool = True
    data: bytes = field(default=b"", repr=False)

    @classmethod
    def create(cls, language_id: str, text: str) -> SyntaxTree | None:
        parser = parser_for(language_id)
        if parser is None:
            return None
        st = cls(language_id, parser)
        st.data = text.encode("utf-8", "surrogatepass")
        return st

    def edit(self, old_text: str, start: int, end: int, new_fragment: str,
             index: LineIndex | None = None) -> None:
        """Record that old_text[start:end] became new_fragment (string offsets); `index`,
        the line index of `old_text`, spares a pass over the text before the edit."""
        if self.tree is None:
            self.dirty = True
            return
        sb, sp = _byte_and_point(old_text, start, index)
        eb, ep = _byte_and_point(old_text, end, index)
        frag = new_fragment.encode("utf-8", "surrogatepass")
        rows = new_fragment.count("\n")
        if rows:
            np_ = (sp[0] + rows, len(frag) - frag.rfind(b"\n") - 1)
        else:
            np_ = (sp[0], sp[1] + len(frag))
        self.tree.edit(start_byte=sb, old_end_byte=eb, new_end_byte=sb + len(frag),
                       start_point=sp, old_end_point=ep, new_end_point=np_)
        self.dirty = True

    def current(self, text: str) -> ts.Tree:
        """The tree of `text` (reparsed incrementally if edits were recorded)."""
        if self.tree is None or self.dirty:
            self.data = text.encode("utf-8", "surrogatepass")
            self.tree = self.parser.parse(self.data, self.tree) if self.tree is not None \
                else self.parser.parse(self.data)
            self.dirty = False
        return self.tree


def _byte_and_point(text: str, offset: int, index: LineIndex | None
                    ) -> tuple[int, tuple[int, int]]:
    """(UTF-8 byte offset, tree-sitter point) of a string offset: from the line index when
    given (an ASCII text needs no encoding at all), else by scanning the text."""
    if index is None:
        return byte_offset(text, offset), byte_point(text, offset)
    row = index.line_of(offset)
    ls = index.start(row)
    col = len(text[ls:offset].encode("utf-8", "surrogatepass"))
    if text.isascii():
        return offset, (row, col)
    return byte_offset(text, ls) + col, (row, col)


def node_at(tree: ts.Tree, text: str, offset: int, left: bool = False) -> ts.Node:
    """The smallest node at `offset`; with `left`, the one holding the character before it
    (a cursor at the end of a line comment is inside the comment)."""
    b = byte_offset(text, offset)
    a = b - 1 if left and b > 0 else b
    return tree.root_node.descendant_for_byte_range(a, b) or tree.root_node


def in_kind(node: ts.Node | None, *needles: str, depth: int = 4) -> ts.Node | None:
    """The first of node and its ancestors (up to `depth`) whose type contains a needle."""
    cur = node
    for _ in range(depth):
        if cur is None:
            return None
        if any(n in cur.type for n in needles):
            return cur
        cur = cur.parent
    return None


def ancestors(node: ts.Node) -> list[ts.Node]:
    out = []
    cur = node.parent
    while cur is not None:
        out.append(cur)
        cur = cur.parent
    return out


def _end_point(start: tuple[int, int], fragment: str) -> tuple[int, int]:
    rows = fragment.count("\n")
    last = fragment[fragment.rfind("\n") + 1:]
    return start[0] + rows, (0 if rows else start[1]) + len(last.encode("utf-8", "surrogatepass"))


def _reparse_with(language_id: str, base_tree: ts.Tree | None, before: str, middle: str,
                  after: str, removed: str = "") -> tuple[ts.Tree, ts.Tree] | None:
    """(tree of before+removed+after, tree of before+middle+after), the second reparsed
    incrementally from a copy of the first (`base_tree` when given); None without a grammar."""
    parser = parser_for(language_id)
    if parser is None:
        return None
    base = base_tree if base_tree is not None else parser.parse(
        (before + removed + after).encode("utf-8", "surrogatepass"))
    tree: Any = base.copy()
    sb = len(before.encode("utf-8", "surrogatepass"))
    rb = len(removed.encode("utf-8", "surrogatepass"))
    mb = len(middle.encode("utf-8", "surrogatepass"))
    sp = byte_point(before, len(before))
    tree.edit(start_byte=sb, old_end_byte=sb + rb, new_end_byte=sb + mb,
              start_point=sp, old_end_point=_end_point(sp, removed), new_end_point=_end_point(sp, middle))
    return base, parser.parse((before + middle + after).encode("utf-8", "surrogatepass"), tree)


def adds_error(language_id: str, base_tree: ts.Tree | None, before: str, middle: str,
               after: str) -> bool:
    """Whether before+middle+after has more parse errors than before+after.

    `base_tree`, if given, is the (current) tree of before+after: it is copied and edited, so
    the check reparses incrementally.
    """
    res = _reparse_with(language_id, base_tree, before, middle, after)
    return res is not None and count_errors(res[1].root_node) > count_errors(res[0].root_node)


def _error_nodes(node: ts.Node, limit: int = 64) -> list[ts.Node]:
    out: list[ts.Node] = []
    stack = [node]
    while stack and len(out) < limit:
        cur = stack.pop()
        if cur.is_error or cur.is_missing:
            out.append(cur)
            continue
        stack.extend(c for c in cur.children if c.has_error or c.is_missing)
    return out


def _line_around(text: str, i: int) -> tuple[int, int]:
    """[start, end) of the non-blank line of `text` holding offset i (or the last one before)."""
    i = max(0, min(i, len(text)))
    s = text.rfind("\n", 0, i) + 1
    while s > 0 and not text[s:i].strip():  # a blank line or its start: the line above
        i = s - 1
        s = text.rfind("\n", 0, i) + 1
    e = text.find("\n", s)
    return s, (len(text) if e < 0 else e)


def merge_spans(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for s, e in sorted(spans):
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return out


def error_spans(language_id: str, base_tree: ts.Tree | None, before: str, middle: str,
                after: str, removed: str = "") -> list[tuple[int, int]]:
    """Character spans of `middle` inside the parse errors that putting it between `before`
    and `after` (in place of `removed`) adds ([] when it adds none: `edit_adds_error`). ERROR nodes are clipped to the middle; a MISSING
    node, or an error that lies wholly outside the middle (an unclosed bracket reported at
    the end of the file), maps to the middle's line at (or before) it."""
    res = _reparse_with(language_id, base_tree, before, middle, after, removed)
    if res is None or not middle or not edit_adds_error(language_id, res[0], before, middle, after, removed):
        return []
    sb = len(before.encode("utf-8", "surrogatepass"))
    mdata = middle.encode("utf-8", "surrogatepass")
    me = sb + len(mdata)

    def char(b: int) -> int:  # byte offset (document) -> character offset in middle
        k = max(0, min(b - sb, len(mdata)))
        return len(mdata[:k].decode("utf-8", "ignore"))

    spans: list[tuple[int, int]] = []
    for node in _error_nodes(res[1].root_node):
        s, e = node.start_byte, node.end_byte
        if node.is_missing or e <= s:
            if sb <= s <= me:
                spans.append(_line_around(middle, char(s)))
            continue
        if e > sb and s < me:
            spans.append((char(s), char(e)))
    if not spans:  # the error shows outside the middle: blame the middle's last line
        spans.append(_line_around(middle, len(middle.rstrip())))
    return merge_spans([(s, e) for s, e in spans if e > s])


# Blocks that may not be empty, nor hold statements at different columns (tree-sitter-python
# parses `def f():` with nothing under it, and an unexpected indent, without an error; Python
# raises IndentationError on both).
_STRICT_BLOCKS: dict[str, frozenset[str]] = {"python": frozenset({"block", "module"})}


def _bad_blocks(language_id: str, root: ts.Node, lo: int, hi: int) -> int:
    """Blocks that are empty or ragged among the nodes that touch bytes [lo, hi]."""
    kinds = _STRICT_BLOCKS.get(language_id)
    if not kinds:
        return 0
    n = 0
    stack = [root]
    while stack:
        cur = stack.pop()
        if cur.type in kinds:
            cols = {c.start_point[1] for c in cur.named_children if c.type != "comment"}
            n += (not cols and cur.type == "block") or len(cols) > 1
        stack.extend(c for c in cur.children if c.start_byte <= hi and c.end_byte >= lo)
    return n


def _line_end_after(text: str, lines: int) -> int:
    """The end of the `lines`-th line of `text` that holds code, counting its first (partial)
    line as line 0 whatever it holds; len(text) when there are fewer."""
    pos = text.find("\n")
    seen = 0
    while pos >= 0 and seen < lines:
        nxt = text.find("\n", pos + 1)
        end = len(text) if nxt < 0 else nxt
        if text[pos + 1: end].strip():
            seen += 1
        if seen == lines:
            return end
        pos = nxt
    return len(text) if pos < 0 else pos


def _added(language_id: str, trees: tuple[ts.Tree, ts.Tree], before: str, removed: str,
           middle: str, after: str, window: bool = False) -> bool | None:
    """Whether the edit from the first tree to the second adds a parse error (see
    `edit_adds_error`); None when an error that starts above the edited lines runs into the
    edit (an unclosed bracket above: the lines cannot be judged in this tree). `window`: the
    trees are of the cursor's unit alone; there such an error leaves only the checks that
    do not depend on where it ends (an error away from the old ones, a bad block)."""
    old, new = trees
    enc = "utf-8"
    sb = len(before.encode(enc, "surrogatepass"))
    oe = sb + len(removed.encode(enc, "surrogatepass"))
    ne = sb + len(middle.encode(enc, "surrogatepass"))
    ls = sb - len(before[before.rfind("\n") + 1:].encode(enc, "surrogatepass"))
    old_nodes, new_nodes = _error_nodes(old.root_node), _error_nodes(new.root_node)
    above = {n.start_byte for n in old_nodes if n.start_byte < ls and not n.is_missing}
    swallowed = any(n.start_byte in above and n.end_byte > sb for n in new_nodes)
    if swallowed and not window:
        return None  # an error from above runs into the edit (an unclosed bracket)
    if not swallowed and count_errors(new.root_node) > count_errors(old.root_node):
        return True

    def moved(b: int) -> int:  # a byte of the old text, in the new one
        return b if b <= sb else (b - oe + ne if b >= oe else ne)

    # old errors where they are now; one the edit falls into keeps its two sides, not the new text
    olds = [(moved(n.start_byte), min(moved(n.end_byte), sb) if n.start_byte <= sb else moved(n.end_byte))
            for n in old_nodes]
    olds += [(ne, moved(n.end_byte)) for n in old_nodes if n.start_byte < sb and n.end_byte > oe]
    for n in new_nodes:
        if not any(s <= n.end_byte and n.start_byte <= e for s, e in olds):
            return True  # an error where there was none: the edit fixed one and broke another
    if _bad_blocks(language_id, new.root_node, sb, ne) > _bad_blocks(language_id, old.root_node, sb, oe):
        return True
    if swallowed:
        return False
    # the edited lines and the next line of code (where an unfinished header shows) parse
    hi = ne + len(after[: _line_end_after(after, 1)].encode(enc, "surrogatepass"))
    return any(n.end_byte >= ls and n.start_byte <= hi for n in new_nodes)


_UNIT_START = re.compile(r"[^\s)\]}#/*-]")


def _dedent(text: str, d: int, first: bool = True) -> str | None:
    """`text` with `d` leading columns taken off each line (not its first unless `first`);
    None when a line with code has less indentation than that."""
    lines = text.split("\n")
    out = []
    for k, line in enumerate(lines):
        if k == 0 and not first:
            out.append(line)
        elif line[:d].strip():
            return None
        else:
            out.append(line[d:])
    return "\n".join(out)


def _units(before: str, middle: str, after: str) -> list[tuple[str, str, str]]:
    """The statements that hold the cursor, outermost first, each as (before, middle, after)
    cut to it and dedented to column 0: a line above with less indentation than the cursor's
    line starts one (and the cursor's line, when it has code, the innermost), which ends
    before the next line below with no more indentation than its own."""
    rows = before.split("\n")
    cursor_row = rows[-1]
    limit = len(cursor_row) - len(cursor_row.lstrip(" \t"))
    starts: list[tuple[int, int]] = []  # (row, indentation)
    for r in range(len(rows) - 2, -1, -1):
        line = rows[r]
        ind = len(line) - len(line.lstrip(" \t"))
        if line.strip() and ind < limit and _UNIT_START.match(line, ind):
            starts.append((r, ind))
            limit = ind
            if ind == 0:
                break
    if cursor_row.strip():  # innermost: the statement the cursor's line starts
        starts.insert(0, (len(rows) - 1, len(cursor_row) - len(cursor_row.lstrip(" \t"))))
    out: list[tuple[str, str, str]] = []
    below = after.split("\n")
    for r, d in reversed(starts):
        end = next((k for k in range(1, len(below)) if below[k].strip()
                    and len(below[k]) - len(below[k].lstrip(" \t")) <= d), len(below))
        wb, wm, wa = (_dedent("\n".join(rows[r:]), d), _dedent(middle, d, first=False),
                      _dedent("\n".join(below[:end]), d, first=False))
        if wb is not None and wm is not None and wa is not None:
            out.append((wb, wm, wa))
    return out


def edit_adds_error(language_id: str, base_tree: ts.Tree | None, before: str, middle: str,
                    after: str, removed: str = "") -> bool:
    """Whether replacing `removed` by `middle` between `before` and `after` adds a parse
    error: more ERROR/MISSING nodes than before, or one that overlaps none of the old ones
    (moved by the edit), or (Python) a block around the edit left empty or ragged (an
    unexpected indent), or any error on the edited lines or the next line of code (a line
    being typed must come out whole). Errors elsewhere in the file do not count; where one
    from above runs into the edit (an unclosed bracket, a string being typed), the
    statements that hold the cursor are judged alone (`_units`). `base_tree`: the current tree of before+removed+after (copied, not
    changed); False without a grammar."""
    res = _reparse_with(language_id, base_tree, before, middle, after, removed)
    if res is None:
        return False
    added = _added(language_id, res, before, removed, middle, after)
    units = _units(before, middle, after) if added is None else []
    for wb, wm, wa in units:  # outermost first: the first that can be judged alone
        local = _reparse_with(language_id, None, wb, wm, wa, removed)
        added = None if local is None else _added(language_id, local, wb, removed, wm, wa)
        if added is not None:
            return added
    if units:  # still swallowed in the innermost: what does not depend on where it ends
        wb, wm, wa = units[-1]
        local = _reparse_with(language_id, None, wb, wm, wa, removed)
        return local is not None and bool(_added(language_id, local, wb, removed, wm, wa, window=True))
    return bool(added)
