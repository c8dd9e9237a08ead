"""Names in scope at the cursor, for the first-identifier constraint (`engine.api.Names`).

Pure (a document's text and tree in, names out) and incremental: the names a file binds at
its top level come from one tree-sitter query over the file, kept per document and reused
while the text outside the cursor's top-level statement is unchanged (consecutive keystrokes
inside a function); the cursor's own statement, its enclosing functions (parameters and
locals) and class (`self.` / `this.` members) are queried over their byte ranges only.

`use_site` says whether the cursor ends an identifier prefix in a *use* position: not a
string or comment, not after `def`/`class`/`function`/`let`..., not in a parameter list, not a
line's first word (it may be a new binding: `total = ...`), not left of `=` on its line. After
`X.`, only members count: `self.`/`this.` (the enclosing class), or an imported module that
the workspace index has parsed; any other receiver gives no names.

`candidates` gathers, for a use site, the names that extend the typed prefix: the enclosing
scopes' locals and parameters, the file's top-level names and imports, the language's
builtins and keywords, and the workspace index's top-level names.
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import tree_sitter as ts

from llada_lsp.context.name_queries import Compiled, compiled
from llada_lsp.text.positions import byte_offset

IDENT_TAIL = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*$")
WORD_BEFORE = re.compile(r"([A-Za-z_$][A-Za-z0-9_$]*)\s+$")
RECEIVER = re.compile(r"([A-Za-z_$][A-Za-z0-9_$.]*)\.$")
PARAMS = re.compile(r"\b(?:def|function|fn|func)\s*[A-Za-z0-9_$]*\s*\([^)]*$|\blambda\b[^:]*$")
MAX_NAMES = 256  # engine.api.NAMES_MAX
# A file's top-level names are read from at most this many statements (Python), or this many
# bytes (the other languages' query): a 500 KB file of 100,000 statements took 1.4 s of the
# event loop to walk whole (bench/next_edit_load.py `complete`). A file over the bound is read
# at its start (`HEAD_STATEMENTS` / `HEAD_BYTES`: its imports, its early definitions) and in a
# window around the cursor (`AROUND_BYTES` either side, at most `AROUND_STATEMENTS`); the names
# bound elsewhere, far from the cursor, go unhinted (the cursor's own statement always counts).
MAX_TOP_STATEMENTS = 5000
MAX_TOP_BYTES = 256 * 1024
HEAD_STATEMENTS = 1000
AROUND_STATEMENTS = MAX_TOP_STATEMENTS - HEAD_STATEMENTS
HEAD_BYTES = MAX_TOP_BYTES // 2
AROUND_BYTES = MAX_TOP_BYTES // 4
MIN_TYPED = 1


@dataclass(frozen=True)
class UseSite:
    typed: str  # the identifier prefix before the cursor
    receiver: str  # the text before `.typed` ("" for a bare name)
    start_byte: int  # where `typed` starts, in the tree's bytes


def use_site(text: str, offset: int, language_id: str, tree: Any) -> UseSite | None:
    """The identifier prefix the cursor ends, when it stands where a known name is used."""
    comp = compiled(language_id)
    if comp is None or tree is None:
        return None
    if offset < len(text) and (text[offset].isalnum() or text[offset] in "_$"):
        return None  # inside a word: the rest of it is already there
    line_start = text.rfind("\n", 0, offset) + 1
    before = text[line_start:offset]
    m = IDENT_TAIL.search(before)
    if m is None or len(m.group()) < MIN_TYPED or m.group()[0].isdigit():
        return None
    typed, head = m.group(), before[: m.start()]
    annotation = bool(re.search(r"[:=]", re.split(r"[(,]", head)[-1]))  # a parameter's type or default
    if _in_string_or_comment(head, language_id) or (PARAMS.search(head) and not annotation):
        return None  # the tree of a line being typed is often broken: the line's text decides
    rest = text[offset: text.find("\n", offset) if "\n" in text[offset:] else len(text)]
    if re.match(r"\s*=(?!=)", rest):
        return None  # left of `=`
    recv = RECEIVER.search(head)
    receiver = recv.group(1) if recv else ""
    if not receiver:
        if not head.strip():
            return None  # a line's first word: maybe a new binding
        w = WORD_BEFORE.search(head)
        if w is not None and w.group(1) in comp.spec.def_words:
            return None
        if re.search(r"\b(import|from)\b", head):
            return None
    start = byte_offset(text, offset - len(typed))
    node = tree.root_node.descendant_for_byte_range(max(0, start), max(0, start))
    while node is not None:
        if node.type in comp.spec.skip or (node.type in comp.spec.parameters and not annotation):
            return None
        node = node.parent
    return UseSite(typed, receiver, start)


def _in_string_or_comment(head: str, language_id: str) -> bool:
    """Whether the end of `head` (a line's text before the word) is inside a string or a
    comment, by a scan of its quotes (escapes skipped)."""
    quote = ""
    i = 0
    while i < len(head):
        c = head[i]
        if quote:
            if c == "\\":
                i += 1
            elif c == quote:
                quote = ""
        elif c in "\"'`":
            quote = c
        elif c == "#" and language_id == "python" or head.startswith("//", i):
            return True
        i += 1
    return bool(quote)


@dataclass
class _Top:
    key: tuple[int, int, int, int]  # (hash of the bytes before, hash after, statement length, window anchor)
    names: frozenset[str]
    imports: dict[str, str]  # local name -> dotted module (Python `import a.b as c`)


@dataclass
class NameScopes:
    """Per-document cache of top-level names (`candidates` is the entry point)."""

    tops: dict[str, _Top] = field(default_factory=dict)
    hits: int = 0
    misses: int = 0

    def candidates(self, uri: str, language_id: str, text: str, tree: Any, site: UseSite,
                   index_names: Any = None, module_names: Any = None, members_of: Any = None
                   ) -> tuple[str, ...]:
        """Names that extend `site.typed`, nearest scope first, at most MAX_NAMES.
        `index_names(typed)`: the workspace index's top-level names with that prefix;
        `module_names(dotted)`: the top-level names of a module the index parsed, or None;
        `members_of(base)`: the members of a base class the index knows (`self.` in a subclass)."""
        comp = compiled(language_id)
        if comp is None or tree is None:
            return ()
        data: bytes = text.encode("utf-8", "surrogatepass") if not text.isascii() else text.encode()
        typed = site.typed
        found: dict[str, None] = {}
        scopes = _enclosing(tree.root_node, site.start_byte, comp)
        if site.receiver:
            if site.receiver == comp.spec.receiver and scopes.cls is not None:
                _members(comp, scopes.cls, typed, found)
                for base in _bases(scopes.cls) if members_of is not None else ():
                    for n in members_of(base):
                        if n.startswith(typed):
                            found[n] = None
            elif module_names is not None and "." not in site.receiver:
                top = self._top(uri, comp, data, tree, scopes.stmt, site.start_byte)
                dotted = top.imports.get(site.receiver)
                names = module_names(dotted) if dotted else None
                for n in names or ():
                    if n.startswith(typed):
                        found[n] = None
            return tuple(found)[:MAX_NAMES]
        for fn in scopes.functions:  # innermost first
            _capture(comp.local, fn.start_byte, fn.end_byte, fn, typed, found)
        top = self._top(uri, comp, data, tree, scopes.stmt, site.start_byte)
        for n in top.names:
            if n.startswith(typed):
                found[n] = None
        for n in sorted(comp.spec.always):
            if n.startswith(typed):
                found[n] = None
        if index_names is not None:
            for n in index_names(typed):
                found[n] = None
        return tuple(found)[:MAX_NAMES]

    def _top(self, uri: str, comp: Compiled, data: bytes, tree: Any, stmt: Any, at: int) -> _Top:
        """The file's top-level names (`_top_names`, around byte `at`): cached while the bytes
        outside the cursor's top-level statement stay the same and the cursor stays in it; the
        statement's own names are added each time."""
        s0, s1 = (stmt.start_byte, stmt.end_byte) if stmt is not None else (len(data), len(data))
        key = (hash(data[:s0]), hash(data[s1:]), s1 - s0, s0 if stmt is not None else at)
        cached = self.tops.get(uri)
        if cached is None or cached.key[:2] != key[:2] or cached.key[3] != key[3]:
            self.misses += 1
            names, imports = _top_names(comp, tree.root_node, data, at)
            cached = _Top(key, frozenset(names), imports)
            self.tops[uri] = cached
            return cached
        self.hits += 1
        if stmt is None or cached.key == key:
            return cached
        own: dict[str, None] = {}  # the statement may have changed: its own top-level names
        _capture(comp.top, s0, s1, tree.root_node, "", own)
        return _Top(key, cached.names | frozenset(own), cached.imports)

    def forget(self, uri: str) -> None:
        self.tops.pop(uri, None)


@dataclass
class _Scopes:
    functions: list[Any]
    cls: Any
    stmt: Any  # the top-level statement holding the cursor


def _enclosing(root: Any, at: int, comp: Compiled) -> _Scopes:
    out = _Scopes([], None, None)
    node = root.descendant_for_byte_range(at, at)
    while node is not None and node.parent is not None:
        if node.type in comp.spec.functions:
            out.functions.append(node)
        elif node.type in comp.spec.classes and out.cls is None:
            out.cls = node
        if node.parent.type == comp.spec.root:
            out.stmt = node
        node = node.parent
    return out


def _capture(query: ts.Query | None, start: int, end: int, node: Any, typed: str, found: dict[str, None]) -> None:
    if query is None:
        return
    cur = ts.QueryCursor(query)
    cur.set_byte_range(start, end)
    for n in cur.captures(node).get("n", ()):
        name = _text(n)
        if name.startswith(typed):
            found[name] = None


def _bases(cls: Any) -> list[str]:
    """The names of a class's base classes (Python's superclasses, JS/TS's extends clause),
    the last part of a dotted one."""
    sup = cls.child_by_field_name("superclasses")
    if sup is None:
        sup = next((c for c in cls.named_children if c.type == "class_heritage"), None)
    if sup is None:
        return []
    return [_text(c).rsplit(".", 1)[-1] for c in sup.named_children if c.type in ("identifier", "attribute")] or \
        [w for c in sup.named_children for w in re.findall(r"[A-Za-z_$][\w$]*", _text(c))[-1:]]


def _text(node: Any) -> str:
    return (node.text or b"").decode("utf-8", "replace")


def _members(comp: Compiled, cls: Any, typed: str, found: dict[str, None]) -> None:
    if comp.members is None:
        return
    cur = ts.QueryCursor(comp.members)
    cur.set_byte_range(cls.start_byte, cls.end_byte)
    for _i, caps in cur.matches(cls):
        recv = caps.get("o")
        if recv and _text(recv[0]) != comp.spec.receiver:
            continue
        for n in caps.get("n", ()):
            name = _text(n)
            if name.startswith(typed):
                found[name] = None


def _top_names(comp: Compiled, root: Any, data: bytes, at: int) -> tuple[set[str], dict[str, str]]:
    """The names a file binds at its top level, and (Python) what its imports bind to which
    module. Python walks the root's statements (a query over a 5,000-line file costs ~10 ms);
    other languages run the anchored query. A file over the bound (`MAX_TOP_STATEMENTS`,
    `MAX_TOP_BYTES`) is read at its start and around byte `at` (the cursor)."""
    if comp.spec.root != "module":
        names: dict[str, None] = {}
        if len(data) <= MAX_TOP_BYTES:
            _capture(comp.top, 0, len(data), root, "", names)
        else:
            _capture(comp.top, 0, HEAD_BYTES, root, "", names)
            _capture(comp.top, max(HEAD_BYTES, at - AROUND_BYTES), at + AROUND_BYTES, root, "", names)
        return set(names), {}
    out: set[str] = set()
    imports: dict[str, str] = {}
    first = _first_named(root, MAX_TOP_STATEMENTS + 1)
    if len(first) > MAX_TOP_STATEMENTS:
        first = first[:HEAD_STATEMENTS] + _named_around(root, at, AROUND_BYTES, AROUND_STATEMENTS)
    _python_statements(first, out, imports, 0)
    return out, imports


def _named_around(node: Any, at: int, reach: int, limit: int) -> list[Any]:
    """`node`'s named children that end after `at - reach` and start before `at + reach`: the
    last `limit // 2` of those that end by `at` and the first of the others, `limit` in all
    (the cursor finds the first by its byte: no walk from the start)."""
    before: deque[Any] = deque(maxlen=limit // 2)
    after: list[Any] = []
    cursor = node.walk()
    if cursor.goto_first_child_for_byte(max(0, at - reach)) is None:
        return []
    while len(after) < limit - len(before) and cursor.node is not None and cursor.node.start_byte < at + reach:
        if cursor.node.is_named:
            (before if cursor.node.end_byte <= at else after).append(cursor.node)
        if not cursor.goto_next_sibling():
            break
    return [*before, *after]


def _first_named(node: Any, limit: int) -> list[Any]:
    """`node`'s first `limit` named children, by a cursor (not all of them made at once)."""
    out: list[Any] = []
    cursor = node.walk()
    if not cursor.goto_first_child():
        return out
    while len(out) < limit:
        if cursor.node is not None and cursor.node.is_named:
            out.append(cursor.node)
        if not cursor.goto_next_sibling():
            break
    return out


def _python_statements(nodes: list[Any], out: set[str], imports: dict[str, str], depth: int) -> None:
    for c in nodes:
        kind = c.type
        if kind == "decorated_definition":
            c = c.child_by_field_name("definition") or c
            kind = c.type
        if kind in ("function_definition", "class_definition"):
            n = c.child_by_field_name("name")
            if n is not None:
                out.add(_text(n))
        elif kind == "expression_statement":
            a = c.named_children[0] if c.named_child_count else None
            left = a.child_by_field_name("left") if a is not None and a.type == "assignment" else None
            if left is not None and left.type == "identifier":
                out.add(_text(left))
            elif left is not None and left.type in ("pattern_list", "tuple_pattern"):
                out.update(_text(x) for x in left.named_children if x.type == "identifier")
        elif kind in ("import_statement", "import_from_statement"):
            _python_import(_text(c), out, imports)
        elif depth < 4 and kind in ("if_statement", "try_statement", "with_statement", "else_clause",
                                    "except_clause", "finally_clause", "elif_clause", "block"):
            _python_statements(c.named_children, out, imports, depth + 1)


def _python_import(stmt: str, out: set[str], imports: dict[str, str]) -> None:
    """What one import statement binds: `import a.b` binds a, `import a.b as c` binds c to
    a.b, `from a import b as c` binds c to a.b."""
    stmt = " ".join(stmt.replace("(", " ").replace(")", " ").replace("\\", " ").split())
    m = re.match(r"from ([\w.]+) import (.+)", stmt)
    parts = (m.group(2) if m else stmt.removeprefix("import ")).split(",")
    for part in parts:
        bits = part.split()
        if not bits or bits[0] == "*":
            continue
        dotted, local = bits[0], bits[-1] if len(bits) == 3 and bits[1] == "as" else None
        if m:
            local = local or dotted
            imports[local] = f"{m.group(1)}.{dotted}"
        else:
            imports[local or dotted.split(".")[0]] = dotted if local else dotted.split(".")[0]
            local = local or dotted.split(".")[0]
        out.add(local)
