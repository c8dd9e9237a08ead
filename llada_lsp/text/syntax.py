"""tree-sitter adapter: grammars by language, incrementally edited trees, error checks.

Everything tree-sitter-specific lives here; the rest of the server asks questions
(`node kind at the cursor`, `does this text add a parse error`) in string offsets.
"""

from __future__ import annotations

import importlib
import logging
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


CHUNK = 1024  # bytes a parse off the event loop reads per callback (the loop may take the GIL there)


@dataclass
class SyntaxTree:
    """One document's tree, edited incrementally and reparsed lazily: on the event loop when a
    request needs it (`current`), or on a thread (`parse_job`, `Document.parsed`) while the
    loop serves other requests; the edits that come meanwhile are kept (`pending`) and
    applied to the thread's tree when it is taken."""

    language_id: str
    parser: ts.Parser
    tree: ts.Tree | None = None
    dirty: bool = True
    data: bytes = field(default=b"", repr=False)
    pending: list[dict[str, Any]] | None = field(default=None, repr=False)  # edits during a thread's parse
    job: Any = field(default=None, repr=False)  # that parse's future (Document.parsed)

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
        self.dirty = True
        if self.tree is None and self.pending is None:
            return
        sb, sp = _byte_and_point(old_text, start, index)
        eb, ep = _byte_and_point(old_text, end, index)
        frag = new_fragment.encode("utf-8", "surrogatepass")
        rows = new_fragment.count("\n")
        if rows:
            np_ = (sp[0] + rows, len(frag) - frag.rfind(b"\n") - 1)
        else:
            np_ = (sp[0], sp[1] + len(frag))
        edit: dict[str, Any] = {"start_byte": sb, "old_end_byte": eb, "new_end_byte": sb + len(frag),
                                "start_point": sp, "old_end_point": ep, "new_end_point": np_}
        if self.pending is not None:
            self.pending.append(edit)
        if self.tree is not None:
            self.tree.edit(**edit)

    def parse_job(self, text: str) -> tuple[bytes, Any]:
        """(the text's bytes, a function that parses them) for a thread: incremental from a
        copy of the tree as edited, with a parser of its own and the text read in `CHUNK`s,
        and a progress callback that tree-sitter calls all through the parse, its long last
        phase included: at each call into Python the GIL can change hands, so the event
        loop's thread waits at most CPython's switch interval for it. The edits from now on
        are kept for `take`."""
        data = text.encode("utf-8", "surrogatepass")
        old = self.tree.copy() if self.tree is not None else None
        parser = parser_for(self.language_id)
        assert parser is not None  # this tree was made for a grammar

        def read(b: int, _point: tuple[int, int]) -> bytes:
            return data[b:b + CHUNK]

        def progress(_offset: int, _has_error: bool) -> bool:
            return False  # never cancels; a Python call: the loop's thread can take the GIL here

        self.pending = []
        if old is None:
            return data, (lambda: parser.parse(read, progress_callback=progress))
        return data, (lambda: parser.parse(read, old, progress_callback=progress))

    def take(self, data: bytes, tree: ts.Tree) -> None:
        """On the loop: the tree a `parse_job` made, with the edits made since applied to it
        (then dirty: the next `current` reparses them, incrementally)."""
        edits, self.pending = self.pending or [], None
        for e in edits:
            tree.edit(**e)
        self.tree, self.data, self.dirty = tree, data, bool(edits)

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


def reparse_with(language_id: str, base_tree: ts.Tree | None, before: str, middle: str,
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
    res = reparse_with(language_id, base_tree, before, middle, after)
    return res is not None and count_errors(res[1].root_node) > count_errors(res[0].root_node)


def error_nodes(node: ts.Node, limit: int = 64) -> list[ts.Node]:
    """The ERROR and MISSING nodes under `node` (none inside an ERROR; only subtrees with
    errors are entered, so a tree without any costs nothing)."""
    out: list[ts.Node] = []
    stack = [node] if node.has_error or node.is_missing else []
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
                after: str) -> list[tuple[int, int]]:
    """Character spans of `middle` inside the parse errors that inserting it between `before`
    and `after` adds ([] when it adds none: no more errors than before). ERROR nodes are
    clipped to the middle; a MISSING node, or an error that lies wholly outside the middle
    (an unclosed bracket reported at the end of the file), maps to the middle's line at (or
    before) it."""
    res = reparse_with(language_id, base_tree, before, middle, after)
    if res is None or not middle or count_errors(res[1].root_node) <= count_errors(res[0].root_node):
        return []
    return middle_error_spans(res[1], before, middle)


def middle_error_spans(tree: ts.Tree, before: str, middle: str) -> list[tuple[int, int]]:
    """Character spans of `middle` (placed after `before` in the text of `tree`) inside the
    tree's parse errors, as `error_spans` maps them; the middle's last line when none lies
    in it."""
    sb = len(before.encode("utf-8", "surrogatepass"))
    mdata = middle.encode("utf-8", "surrogatepass")
    me = sb + len(mdata)

    def char(b: int) -> int:  # byte offset (document) -> character offset in middle
        k = max(0, min(b - sb, len(mdata)))
        return len(mdata[:k].decode("utf-8", "ignore"))

    spans: list[tuple[int, int]] = []
    for node in error_nodes(tree.root_node):
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
