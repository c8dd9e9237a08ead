"""What the last edit was, and where its follow-ups go: pure, tree-sitter only (no model).

`analyze(language, old, new, old_tree, new_tree)` compares the text before an edit with the
text after it (the trees are those of the two texts) and names the edit:
- `rename`: one identifier at a binding position (a def, class, parameter, declaration,
  assignment target; `self.x` / `this.x` attributes) became another name. Its follow-up sites
  are the other uses of the old name that the binding reaches: in the binding's scope, not in
  nested scopes that bind the name again (shadowing), never in strings or comments (not
  identifiers), never attribute names of other objects or keyword-argument names. The new
  name is the fill (`Site.prior`), decided by the analysis.
- `param_added` / `param_removed` / `param_reordered`: the parameter names of one function
  changed. The sites are the calls of that function (by name, `self.name(...)` for methods) in
  the file: an insertion point for an added argument (its content is left to the model:
  `Site.prior` is None, `Site.hint` the parameter's name), the argument to delete, or the
  arguments in their new order.
- `none`: anything else (a new statement, a changed literal, a use switched to another
  variable...): no follow-ups.

The diff is textual first (common prefix and suffix), then read on the trees: a changed
stretch whose words differ only by one name, consistently, is a rename (so an edit that
already updated some sites is still the same rename); a changed stretch inside one function's
parameter list is a parameter change. Offsets in and out are character offsets.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import tree_sitter as ts

WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
TOKENS = re.compile(r"[A-Za-z_0-9]+|\s+|.", re.S)


@dataclass(frozen=True)
class Lang:
    """A grammar's node types that the analysis reads."""

    idents: frozenset[str]  # identifier node types that may name a binding
    functions: frozenset[str]  # function-like scopes (their `parameters` bind)
    scopes: frozenset[str]  # every scope type (functions, classes, blocks, comprehensions)
    params: frozenset[str]  # parameter-list node types
    calls: frozenset[str]  # call node types (fields `function` and `arguments`)
    self_names: frozenset[str]  # the receiver of attribute renames and method calls
    attribute: str  # the attribute/member node type ("" for none)
    attr_field: str  # the attribute node's field holding the name
    object_field: str  # the attribute node's field holding the object


PY = Lang(frozenset({"identifier"}), frozenset({"function_definition", "lambda"}),
          frozenset({"function_definition", "lambda", "class_definition", "list_comprehension",
                     "set_comprehension", "dictionary_comprehension", "generator_expression"}),
          frozenset({"parameters", "lambda_parameters"}), frozenset({"call"}), frozenset({"self", "cls"}),
          "attribute", "attribute", "object")
JS = Lang(frozenset({"identifier", "type_identifier"}),
          frozenset({"function_declaration", "function_expression", "arrow_function", "method_definition",
                     "function", "generator_function_declaration"}),
          frozenset({"function_declaration", "function_expression", "arrow_function", "method_definition",
                     "function", "generator_function_declaration", "statement_block", "class_body",
                     "for_statement", "for_in_statement"}),
          frozenset({"formal_parameters"}), frozenset({"call_expression"}), frozenset({"this"}),
          "member_expression", "property", "object")
GO = Lang(frozenset({"identifier", "type_identifier"}),
          frozenset({"function_declaration", "method_declaration", "func_literal"}),
          frozenset({"function_declaration", "method_declaration", "func_literal", "block", "for_statement",
                     "if_statement"}),
          frozenset({"parameter_list"}), frozenset({"call_expression"}), frozenset(), "", "", "")
RUST = Lang(frozenset({"identifier", "type_identifier"}),
            frozenset({"function_item", "closure_expression"}),
            frozenset({"function_item", "closure_expression", "block", "for_expression", "match_arm"}),
            frozenset({"parameters", "closure_parameters"}), frozenset({"call_expression"}), frozenset({"self"}),
            "field_expression", "field", "value")
LANGS: dict[str, Lang] = {"python": PY, "javascript": JS, "javascriptreact": JS, "typescript": JS,
                          "typescriptreact": JS, "go": GO, "rust": RUST}
BRACES = (JS, GO, RUST)


@dataclass(frozen=True)
class Site:
    """A follow-up: replace new[start:end]. `prior` is the analysis's content for it (None: the
    model writes it); an insertion's fill goes between `before` and `after` (separators)."""

    start: int
    end: int
    prior: str | None
    before: str = ""
    after: str = ""
    hint: str = ""  # what the site is for (an added parameter's name)


@dataclass(frozen=True)
class Analysis:
    kind: str  # "rename" | "param_added" | "param_removed" | "param_reordered" | "none"
    detail: str = ""
    sites: tuple[Site, ...] = ()
    edited: tuple[int, int] = (0, 0)  # the changed stretch of the new text
    definition: tuple[int, int] | None = None  # the edited definition's span (a function: its signature)

    @property
    def found(self) -> bool:
        return self.kind != "none" and bool(self.sites)


@dataclass
class _Text:
    """A text with its UTF-8 bytes and the offset maps between them (identity for ASCII)."""

    text: str
    data: bytes = field(init=False)
    ascii: bool = field(init=False)

    def __post_init__(self) -> None:
        self.data = self.text.encode("utf-8", "surrogatepass")
        self.ascii = len(self.data) == len(self.text)

    def byte(self, i: int) -> int:
        return i if self.ascii else len(self.text[:i].encode("utf-8", "surrogatepass"))

    def char(self, b: int) -> int:
        return b if self.ascii else len(self.data[:b].decode("utf-8", "surrogatepass"))

    def of(self, n: ts.Node) -> str:
        return self.data[n.start_byte:n.end_byte].decode("utf-8", "surrogatepass")


def _first_diff(x: str, y: str, n: int) -> int:
    """The first index < n where x and y differ (n when none): 4 KiB slices compared, then a
    binary search inside the first unequal one (memcmp speed, little copying)."""
    step, i = 4096, 0
    while i < n and x[i:i + step] == y[i:i + step]:
        i += step
    lo, hi = i, min(n, i + step)
    while lo < hi:
        mid = (lo + hi) // 2
        if x[i:mid + 1] == y[i:mid + 1]:
            lo = mid + 1
        else:
            hi = mid
    return min(lo, n)


def common_ends(old: str, new: str) -> tuple[int, int]:
    """(p, s): old and new share their first p and last s characters, p + s <= min(len)."""
    m = min(len(old), len(new))
    p = _first_diff(old, new, m)
    s = _first_diff(old[::-1], new[::-1], m - p)
    return p, s


def analyze(language: str, old: str, new: str, old_tree: ts.Tree, new_tree: ts.Tree) -> Analysis:
    lang = LANGS.get(language)
    if lang is None or old == new:
        return Analysis("none", "unsupported language" if lang is None else "no change")
    p, s = common_ends(old, new)
    a = p
    while a > 0 and (new[a - 1].isalnum() or new[a - 1] == "_"):
        a -= 1
    bo, bn = len(old) - s, len(new) - s
    while bn < len(new) and (new[bn].isalnum() or new[bn] == "_"):
        bo, bn = bo + 1, bn + 1
    edited = (p, len(new) - s)
    ot, nt = _Text(old), _Text(new)
    got = _rename(lang, ot, nt, a, bo, bn, new_tree) or _params(lang, ot, nt, a, bo, bn, old_tree, new_tree)
    if got is None:
        return Analysis("none", "no follow-up kind", (), edited)
    kind, detail, sites, definition = got
    return Analysis(kind, detail, sites, edited, definition)


# ---------------------------------------------------------------- renames

def _rename(lang: Lang, ot: _Text, nt: _Text, a: int, bo: int, bn: int, tree: ts.Tree
            ) -> tuple[str, str, tuple[Site, ...], tuple[int, int] | None] | None:
    """A consistent one-name rename over the changed stretch, anchored at a binding."""
    if bn - a > 4000 or bo - a > 4000:
        return None
    old_toks, new_toks = TOKENS.findall(ot.text[a:bo]), TOKENS.findall(nt.text[a:bn])
    if len(old_toks) != len(new_toks):
        return None
    pair, anchors, off = None, [], a
    for o, n in zip(old_toks, new_toks, strict=True):
        if o != n:
            if not (WORD.fullmatch(o) and WORD.fullmatch(n)) or (pair is not None and pair != (o, n)):
                return None
            pair = (o, n)
            anchors.append(off)
        off += len(n)
    if pair is None:
        return None
    old_name, new_name = pair
    root = tree.root_node
    for at in anchors:
        b = nt.byte(at)
        node = root.descendant_for_byte_range(b, b + len(new_name.encode()))
        if node is None or nt.of(node) != new_name:
            continue
        got = _binding(lang, nt, node)
        if got is None:
            continue
        scope, attr = got
        sites = _attr_uses(lang, nt, scope, old_name) if attr else _uses(lang, nt, scope, old_name, node.type)
        what = "attribute" if attr else node.parent.type if node.parent is not None else "name"
        out = tuple(Site(x, y, new_name) for x, y in sites)
        return "rename", f"{old_name} -> {new_name} ({what})", out, (nt.char(scope.start_byte), nt.char(scope.end_byte))
    return None


def _field_is(n: ts.Node, name: str) -> bool:
    p = n.parent
    return p is not None and p.child_by_field_name(name) == n


def _up(n: ts.Node, types: frozenset[str]) -> ts.Node | None:
    p = n.parent
    while p is not None and p.type not in types:
        p = p.parent
    return p


def _enclosing(lang: Lang, n: ts.Node) -> ts.Node:
    """The scope a binding at `n` lives in (the root when none)."""
    types = lang.scopes if lang in BRACES else lang.functions | {"class_definition"}
    s = _up(n, types)
    while s is not None and s.type == "class_definition" and lang is PY:
        s = _up(s, types)  # a class body's names are reached through the class, not by name
    return s if s is not None else _root(n)


def _root(n: ts.Node) -> ts.Node:
    while n.parent is not None:
        n = n.parent
    return n


def _binding_scope(lang: Lang, t: _Text, n: ts.Node) -> ts.Node | None:
    got = _binding(lang, t, n)
    return got[0] if got is not None and not got[1] else None


def _binding(lang: Lang, t: _Text, n: ts.Node) -> tuple[ts.Node, bool] | None:
    """(the scope whose uses a binding at `n` reaches, whether they are `self.x` attributes),
    or None when `n` binds nothing."""
    p = n.parent
    if p is None:
        return None
    if lang.attribute and p.type == lang.attribute and _field_is(n, lang.attr_field):
        obj = p.child_by_field_name(lang.object_field)
        if obj is None or t.of(obj) not in lang.self_names:
            return None
        cls = _up(p, frozenset({"class_definition", "class_declaration", "class_body", "class"}))
        return (cls, True) if cls is not None else None
    if n.type not in lang.idents:
        if lang is JS and n.type == "property_identifier" and p.type == "method_definition":
            cls = _up(p, frozenset({"class_body"}))
            return (cls, True) if cls is not None else None
        return None
    if p.type in lang.functions and _field_is(n, "name") or p.type in (
            "class_definition", "class_declaration", "type_spec", "struct_item", "enum_item"):
        if lang is PY and p.type == "function_definition" and p.parent is not None \
                and p.parent.parent is not None and p.parent.parent.type == "class_definition":
            return p.parent.parent, True  # a method: reached as self.name
        return _enclosing(lang, p), False
    if _is_param(lang, n):
        fn = _up(n, lang.functions)
        return (fn, False) if fn is not None else None
    if _is_declared(lang, n):
        comp = _up(n, frozenset({"for_in_clause"})) if lang is PY else None
        if comp is not None and comp.parent is not None:
            return comp.parent, False  # a comprehension's variable
        return _enclosing(lang, n), False
    return None


def _is_param(lang: Lang, n: ts.Node) -> bool:
    p = n.parent
    if p is None:
        return False
    if p.type in lang.params:
        return True
    if p.type in ("default_parameter", "typed_default_parameter", "required_parameter", "optional_parameter",
                  "parameter_declaration", "parameter") and (
            _field_is(n, "name") or _field_is(n, "pattern")):
        return p.parent is not None and p.parent.type in lang.params
    if p.type == "typed_parameter" and p.named_children and p.named_children[0] == n:
        return True
    return p.type == "assignment_pattern" and _field_is(n, "left") and p.parent is not None \
        and p.parent.type in lang.params


def _is_declared(lang: Lang, n: ts.Node) -> bool:
    """`n` is the target of a declaration or assignment."""
    p = n.parent
    if p is None:
        return False
    if lang is PY:
        while p is not None and p.type in ("pattern_list", "tuple_pattern", "list_pattern"):
            p = p.parent
        if p is None:
            return False
        if p.type in ("assignment", "augmented_assignment", "for_statement", "for_in_clause"):
            return _within(n, p.child_by_field_name("left"))
        return p.type in ("as_pattern_target", "named_expression") and (
            p.type != "named_expression" or _field_is(n, "name"))
    if lang is JS:
        return p.type == "variable_declarator" and _field_is(n, "name")
    if lang is GO:
        if p.type in ("var_spec", "const_spec") and _field_is(n, "name"):
            return True
        return p.type == "expression_list" and p.parent is not None and p.parent.type in (
            "short_var_declaration", "range_clause") and _field_is(p, "left")
    return p.type in ("let_declaration", "for_expression") and _field_is(n, "pattern")


def _within(n: ts.Node, outer: ts.Node | None) -> bool:
    return outer is not None and outer.start_byte <= n.start_byte and n.end_byte <= outer.end_byte


def _is_use(lang: Lang, t: _Text, n: ts.Node) -> bool:
    """An identifier that names a variable (not an attribute, not a keyword argument's name)."""
    p = n.parent
    if p is None:
        return False
    if lang.attribute and p.type == lang.attribute and _field_is(n, lang.attr_field):
        return False
    return not (p.type == "keyword_argument" and _field_is(n, "name"))


def _occurrences(t: _Text, scope: ts.Node, name: str) -> list[ts.Node]:
    """The smallest nodes spanning each whole-word match of `name` inside `scope`."""
    out: list[ts.Node] = []
    needle, data, root = name.encode(), t.data, _root(scope)
    i, end = scope.start_byte, scope.end_byte
    while (i := data.find(needle, i, end)) >= 0:
        j = i + len(needle)
        if (i == 0 or not _word_byte(data[i - 1])) and (j >= len(data) or not _word_byte(data[j])):
            n = root.descendant_for_byte_range(i, j)
            if n is not None and n.start_byte == i and n.end_byte == j:
                out.append(n)
        i = j
    return out


def _word_byte(b: int) -> bool:
    return b == 95 or 48 <= b <= 57 or 65 <= b <= 90 or 97 <= b <= 122 or b >= 128


def _uses(lang: Lang, t: _Text, scope: ts.Node, name: str, ident_type: str) -> list[tuple[int, int]]:
    """The old name's uses in `scope` that the binding reaches (nested rebinding scopes out)."""
    nodes = [n for n in _occurrences(t, scope, name) if n.type == ident_type]
    rebinding: set[int] = set()
    for n in nodes:
        s = _binding_scope(lang, t, n)
        if s is not None and s.id != scope.id and _within(s, scope):
            rebinding.add(s.id)
    out: list[tuple[int, int]] = []
    for n in nodes:
        if not _is_use(lang, t, n):
            continue
        p, shadowed = n.parent, False
        while p is not None and p.id != scope.id:
            if p.id in rebinding and not _outer_iterable(n, p):
                shadowed = True
                break
            p = p.parent
        if not shadowed:
            out.append((t.char(n.start_byte), t.char(n.end_byte)))
    return out


def _outer_iterable(n: ts.Node, comp: ts.Node) -> bool:
    """A Python comprehension's first iterable is evaluated outside its scope."""
    first = next((c for c in comp.named_children if c.type == "for_in_clause"), None)
    return first is not None and _within(n, first.child_by_field_name("right"))


def _attr_uses(lang: Lang, t: _Text, scope: ts.Node, name: str) -> list[tuple[int, int]]:
    """`self.name` / `this.name` in `scope` (a class)."""
    out: list[tuple[int, int]] = []
    for n in _occurrences(t, scope, name):
        p = n.parent
        if p is not None and p.type == lang.attribute and _field_is(n, lang.attr_field):
            obj = p.child_by_field_name(lang.object_field)
            if obj is not None and t.of(obj) in lang.self_names:
                out.append((t.char(n.start_byte), t.char(n.end_byte)))
    return out


# ---------------------------------------------------------------- parameter changes

def _params(lang: Lang, ot: _Text, nt: _Text, a: int, bo: int, bn: int, old_tree: ts.Tree, new_tree: ts.Tree
            ) -> tuple[str, str, tuple[Site, ...], tuple[int, int] | None] | None:
    nl = _param_list(lang, new_tree, nt.byte(a), nt.byte(bn))
    ol = _param_list(lang, old_tree, ot.byte(a), ot.byte(bo))
    if nl is None or ol is None:
        return None
    fn = nl.parent
    name_node = fn.child_by_field_name("name") if fn is not None else None
    if fn is None or name_node is None:
        return None
    fname = nt.of(name_node)
    on, nn = _param_names(lang, ot, ol), _param_names(lang, nt, nl)
    skip = 1 if nn and nn[0] in lang.self_names else 0
    on, nn = [x for x in on if x not in lang.self_names], [x for x in nn if x not in lang.self_names]
    body = fn.child_by_field_name("body")  # the signature is what a call needs to see
    definition = (nt.char(fn.start_byte), nt.char(body.start_byte if body is not None else fn.end_byte))
    calls = _calls(lang, nt, new_tree, fname, fn, skip)
    if len(nn) == len(on) + 1 and [x for x in nn if x in on] == on:
        i = next(k for k in range(len(nn)) if k >= len(on) or nn[k] != on[k])
        sites = [s for c in calls if (s := _insert_at(nt, c, i, len(on), nn[i])) is not None]
        return "param_added", f"{fname}: +{nn[i]} at {i}", tuple(sites), definition
    if len(on) == len(nn) + 1 and [x for x in on if x in nn] == nn:
        i = next(k for k in range(len(on)) if k >= len(nn) or nn[k] != on[k])
        sites = [s for c in calls if (s := _remove_at(nt, c, i, len(on))) is not None]
        return "param_removed", f"{fname}: -{on[i]} at {i}", tuple(sites), definition
    if len(on) == len(nn) and sorted(on) == sorted(nn) and on != nn:
        perm = [on.index(x) for x in nn]
        sites = [s for c in calls if (s := _reorder(nt, c, perm)) is not None]
        return "param_reordered", f"{fname}: {', '.join(nn)}", tuple(sites), definition
    return None


def _param_list(lang: Lang, tree: ts.Tree, b0: int, b1: int) -> ts.Node | None:
    n = tree.root_node.descendant_for_byte_range(b0, max(b0, b1))
    while n is not None and n.type not in lang.params:
        if n.type in lang.functions or n.type in lang.scopes:
            return None
        n = n.parent
    if n is None or n.parent is None or n.parent.type not in lang.functions:
        return None
    return n if n.start_byte <= b0 and b1 <= n.end_byte else None


def _param_names(lang: Lang, t: _Text, plist: ts.Node) -> list[str]:
    out: list[str] = []
    for c in plist.named_children:
        if c.type in ("comment", "line_comment", "block_comment"):
            continue
        if c.type in ("identifier", "self_parameter", "self"):
            out.append("self" if c.type in ("self_parameter", "self") else t.of(c))
            continue
        names = [x for x in (c.children_by_field_name("name") or c.children_by_field_name("pattern")
                             or c.children_by_field_name("left")) if x is not None]
        if not names and c.named_children:
            names = [c.named_children[0]]
        for x in names:
            while x.type not in ("identifier", "self") and x.named_children:
                x = x.named_children[0]
            out.append(t.of(x))
    return out


def _calls(lang: Lang, t: _Text, tree: ts.Tree, fname: str, fn: ts.Node, skip: int) -> list[ts.Node]:
    """The argument lists of the calls of `fname` (plain; `self.fname` for a method)."""
    out: list[ts.Node] = []
    scope = tree.root_node
    for n in _occurrences(t, scope, fname):
        if _within(n, fn.child_by_field_name("name")):
            continue
        p = n.parent
        callee = n
        if p is not None and lang.attribute and p.type == lang.attribute and _field_is(n, lang.attr_field):
            obj = p.child_by_field_name(lang.object_field)
            if not skip or obj is None or t.of(obj) not in lang.self_names:
                continue
            callee, p = p, p.parent
        elif skip:
            continue
        if p is None or p.type not in lang.calls or p.child_by_field_name("function") != callee:
            continue
        args = p.child_by_field_name("arguments")
        if args is not None:
            out.append(args)
    return out


def _positional(args: ts.Node) -> list[ts.Node] | None:
    """The call's arguments when they are all plain positional ones (None otherwise)."""
    out = []
    for c in args.named_children:
        if c.type in ("comment", "line_comment", "block_comment"):
            continue
        if c.type in ("keyword_argument", "list_splat", "dictionary_splat", "spread_element",
                      "generator_expression", "variadic_argument"):
            return None
        out.append(c)
    return out


def _insert_at(t: _Text, args: ts.Node, i: int, n_old: int, name: str) -> Site | None:
    pos = _positional(args)
    if pos is None or len(pos) != n_old:
        return None  # defaults or keywords in use: where the argument goes is not known
    if i < len(pos):
        at = t.char(pos[i].start_byte)
        return Site(at, at, None, "", ", ", name)
    if pos:
        at = t.char(pos[-1].end_byte)
        return Site(at, at, None, ", ", "", name)
    at = t.char(args.start_byte) + 1
    return Site(at, at, None, "", "", name)


def _remove_at(t: _Text, args: ts.Node, i: int, n_old: int) -> Site | None:
    pos = _positional(args)
    if pos is None or len(pos) != n_old:
        return None
    if len(pos) == 1:
        a, b = pos[0].start_byte, pos[0].end_byte
    elif i + 1 < len(pos):
        a, b = pos[i].start_byte, pos[i + 1].start_byte
    else:
        a, b = pos[i - 1].end_byte, pos[i].end_byte
    return Site(t.char(a), t.char(b), "")


def _reorder(t: _Text, args: ts.Node, perm: list[int]) -> Site | None:
    pos = _positional(args)
    if pos is None or len(pos) != len(perm):
        return None
    a, b = pos[0].start_byte, pos[-1].end_byte
    seps = [t.data[pos[k].end_byte:pos[k + 1].start_byte].decode("utf-8", "surrogatepass")
            for k in range(len(pos) - 1)]
    parts = [t.of(pos[j]) for j in perm]
    text = parts[0] + "".join(s + x for s, x in zip(seps, parts[1:], strict=True))
    return Site(t.char(a), t.char(b), text)
