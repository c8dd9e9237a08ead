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
- `field_added` (`llada_lsp.nextedit.edit_fields`): a field without a default added to a Python
  dataclass or NamedTuple, a Go or Rust struct: the sites are its constructors in the file,
  an insertion point each (`Site.hint` the field's name).
- `return_added` (`llada_lsp.nextedit.edit_fields`, Python): a value added to a returned tuple: the
  calls unpacked into as many targets get a new target (`Site.hint`: the value's name or `_`).
- `none`: anything else (a new statement, a changed literal, a use switched to another
  variable...): no follow-ups.

The diff is textual first (common prefix and suffix), then read on the trees: a changed
stretch whose words differ only by one name, consistently, is a rename (so an edit that
already updated some sites is still the same rename); a changed stretch inside one function's
parameter list is a parameter change. Offsets in and out are character offsets.

The work is bounded (`llada_lsp.nextedit.edit_limits`): an edit or a follow-up nested too deep,
or a name scanned that occurs too often, gives kind `none` with the reason and the `limit`
hit; the tree before the edit is asked for (`old_tree` may be a function that parses it) only
once the new text's side of the analysis has passed those limits.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import tree_sitter as ts

from llada_lsp.nextedit.edit_fields import field_change, return_change
from llada_lsp.nextedit.edit_js import (
    assigned_shorthand,
    jsdoc_param_sites,
    parameter_property_class,
)
from llada_lsp.nextedit.edit_limits import Guard, Refused, check_depth
from llada_lsp.nextedit.edit_params import param_change
from llada_lsp.nextedit.edit_syntax import (
    BRACES,
    GO,
    JS,
    JS_TOKENS,
    JS_WORD,
    LANGS,
    PY,
    TOKENS,
    WORD,
    Lang,
    Site,
    Text,
    ancestor,
    inside,
    is_field,
    root_of,
    word_nodes,
)


@dataclass(frozen=True)
class Analysis:
    kind: str  # "rename" | "param_*" | "field_added" | "return_added" | "none"
    detail: str = ""
    sites: tuple[Site, ...] = ()
    edited: tuple[int, int] = (0, 0)  # the changed stretch of the new text
    definition: tuple[int, int] | None = None  # the edited definition's span (a function: its signature)
    limit: str = ""  # the limit that refused the analysis ("sites", "depth"), "" when none did

    @property
    def found(self) -> bool:
        return self.kind != "none" and bool(self.sites)


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


def analyze(language: str, old: str, new: str, old_tree: ts.Tree | Callable[[], ts.Tree], new_tree: ts.Tree,
            guard: Guard | None = None) -> Analysis:
    lang = LANGS.get(language)
    if lang is None or old == new:
        return Analysis("none", "unsupported language" if lang is None else "no change")
    p, s = common_ends(old, new)
    a = p
    word = "_$" if lang is JS else "_"
    while a > 0 and (new[a - 1].isalnum() or new[a - 1] in word):
        a -= 1
    bo, bn = len(old) - s, len(new) - s
    while bn < len(new) and (new[bn].isalnum() or new[bn] in word):
        bo, bn = bo + 1, bn + 1
    edited = (p, len(new) - s)
    ot, nt = Text(old, guard), Text(new, guard)
    before = _old_tree(old_tree, ot, a)
    try:
        check_depth(new_tree.root_node, nt.byte(a))
        got = _rename(lang, ot, nt, a, bo, bn, new_tree) \
            or param_change(lang, ot, nt, a, bo, bn, before, new_tree) \
            or field_change(lang, ot, nt, a, bo, bn, before, new_tree) \
            or return_change(lang, ot, nt, a, bo, bn, before, new_tree)
    except Refused as e:
        return Analysis("none", e.reason, (), edited, limit=e.limit)
    if got is None:
        return Analysis("none", "no follow-up kind", (), edited)
    kind, detail, sites, definition = got
    return Analysis(kind, detail, sites, edited, definition)


def _old_tree(given: ts.Tree | Callable[[], ts.Tree], ot: Text, a: int) -> Callable[[], ts.Tree]:
    """The tree before the edit, got (parsed) at the first call and depth-checked at the edit."""
    memo: list[ts.Tree] = []

    def get() -> ts.Tree:
        if not memo:
            tree = given if isinstance(given, ts.Tree) else given()
            check_depth(tree.root_node, ot.byte(min(a, len(ot.text))))
            memo.append(tree)
        return memo[0]
    return get


# ---------------------------------------------------------------- renames

def _rename(lang: Lang, ot: Text, nt: Text, a: int, bo: int, bn: int, tree: ts.Tree
            ) -> tuple[str, str, tuple[Site, ...], tuple[int, int] | None] | None:
    """A consistent one-name rename over the changed stretch, anchored at a binding."""
    if bn - a > 4000 or bo - a > 4000:
        return None
    tokens, words = (JS_TOKENS, JS_WORD) if lang is JS else (TOKENS, WORD)
    old_toks, new_toks = tokens.findall(ot.text[a:bo]), tokens.findall(nt.text[a:bn])
    if len(old_toks) != len(new_toks):
        return None
    pair, anchors, off = None, [], a
    for o, n in zip(old_toks, new_toks, strict=True):
        if o != n:
            if not (words.fullmatch(o) and words.fullmatch(n)) or (pair is not None and pair != (o, n)):
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
        shorthand: set[int] = set()  # `{ old }` keeps its key: `{ old: new }`
        sites = _attr_uses(lang, nt, scope, old_name) if attr else \
            _uses(lang, nt, scope, old_name, node.type, shorthand)
        if not attr and lang is PY:
            sites = _after_rebinding(nt, scope, old_name, node, sites)
        if not attr and lang is JS and _is_param(lang, node):
            sites = sorted(sites + jsdoc_param_sites(nt, scope, old_name))
            cls = parameter_property_class(node)
            if cls is not None:  # also a property: this.name
                sites = sorted(set(sites) | set(_attr_uses(lang, nt, cls, old_name)))
        what = "attribute" if attr else node.parent.type if node.parent is not None else "name"
        out = tuple(Site(x, y, f"{old_name}: {new_name}" if x in shorthand else new_name) for x, y in sites)
        return "rename", f"{old_name} -> {new_name} ({what})", out, (nt.char(scope.start_byte), nt.char(scope.end_byte))
    return None


def _statement(n: ts.Node) -> ts.Node:
    """The statement holding `n` (its ancestor whose parent is a block or the module)."""
    while n.parent is not None and n.parent.type not in ("block", "module"):
        n = n.parent
    return n


def _after_rebinding(t: Text, scope: ts.Node, name: str, anchor: ts.Node, sites: list[tuple[int, int]]
                     ) -> list[tuple[int, int]]:
    """Python: a rename at an assignment that rebinds a name the scope bound before it (a
    parameter, an earlier assignment) renames that binding only: the uses after its statement
    up to the next binding of the name, never the parameter (a public keyword name) nor the
    uses before (its own right-hand side included); nothing when the statement is not directly
    in the scope's body (a branch or a loop: which binding a later use sees is not known)."""
    bound = [n for n in word_nodes(t, scope, name) if (b := _binding_scope(PY, t, n)) is not None and b.id == scope.id]
    if not any(n.start_byte < anchor.start_byte for n in bound):
        return sites  # the first binding: every use is its
    stmt = _statement(anchor)
    body = scope if scope.type == "module" else scope.child_by_field_name("body")
    if body is None or stmt.parent is None or stmt.parent.id != body.id:
        return []
    start = t.char(stmt.end_byte)
    later = [_statement(n).start_byte for n in bound if n.start_byte >= stmt.end_byte]
    end = t.char(min(later)) if later else len(t.text)
    return [(x, y) for x, y in sites if start <= x < end]


def _enclosing(lang: Lang, n: ts.Node) -> ts.Node:
    """The scope a binding at `n` lives in (the root when none)."""
    types = lang.scopes if lang in BRACES else lang.functions | {"class_definition"}
    s = ancestor(n, types)
    while s is not None and s.type == "class_definition" and lang is PY:
        s = ancestor(s, types)  # a class body's names are reached through the class, not by name
    return s if s is not None else root_of(n)


def _binding_scope(lang: Lang, t: Text, n: ts.Node) -> ts.Node | None:
    got = _binding(lang, t, n)
    return got[0] if got is not None and not got[1] else None


def _binding(lang: Lang, t: Text, n: ts.Node) -> tuple[ts.Node, bool] | None:
    """(the scope whose uses a binding at `n` reaches, whether they are `self.x` attributes),
    or None when `n` binds nothing."""
    p = n.parent
    if p is None:
        return None
    if lang.attribute and p.type == lang.attribute and is_field(n, lang.attr_field):
        obj = p.child_by_field_name(lang.object_field)
        if obj is None or t.of(obj) not in lang.self_names:
            return None
        cls = ancestor(p, frozenset({"class_definition", "class_declaration", "class_body", "class"}))
        return (cls, True) if cls is not None else None
    if n.type not in lang.idents:
        if lang is JS and n.type == "property_identifier" and p.type == "method_definition":
            cls = ancestor(p, frozenset({"class_body"}))
            return (cls, True) if cls is not None else None
        return None
    if p.type in lang.functions and is_field(n, "name") or p.type in (
            "class_definition", "class_declaration", "type_spec", "struct_item", "enum_item"):
        if lang is PY and p.type == "function_definition" and p.parent is not None \
                and p.parent.parent is not None and p.parent.parent.type == "class_definition":
            return p.parent.parent, True  # a method: reached as self.name
        return _enclosing(lang, p), False
    if _is_param(lang, n):
        plist = ancestor(n, lang.params)  # its function, or a function type's parameters (no uses)
        fn = plist.parent if plist is not None else None
        return (fn, False) if fn is not None else None
    if _is_declared(lang, n):
        comp = ancestor(n, frozenset({"for_in_clause"})) if lang is PY else None
        if comp is not None and comp.parent is not None:
            return comp.parent, False  # a comprehension's variable
        return _enclosing(lang, n), False
    return None


_JS_PATTERNS = frozenset({"rest_pattern", "array_pattern", "object_pattern", "pair_pattern", "assignment_pattern"})


def _pattern_top(lang: Lang, n: ts.Node) -> ts.Node:
    """JS/TS: the whole destructuring or rest pattern that binds `n` (`...args`, `[a, b]`,
    `{k: v}`'s v, `x = 1`'s x), `n` itself when it is in none."""
    if lang is not JS:
        return n
    while (p := n.parent) is not None and p.type in _JS_PATTERNS:
        if p.type == "pair_pattern" and not is_field(n, "value") or p.type == "assignment_pattern" \
                and not is_field(n, "left"):
            return n
        n = p
    return n


def _is_param(lang: Lang, n: ts.Node) -> bool:
    n = _pattern_top(lang, n)
    p = n.parent
    if p is None:
        return False
    if p.type in lang.params:
        return True
    if p.type in ("default_parameter", "typed_default_parameter", "required_parameter", "optional_parameter",
                  "parameter_declaration", "parameter") and (
            is_field(n, "name") or is_field(n, "pattern")):
        return p.parent is not None and p.parent.type in lang.params
    if p.type == "typed_parameter" and p.named_children and p.named_children[0] == n:
        return True
    return p.type == "assignment_pattern" and is_field(n, "left") and p.parent is not None \
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
            return inside(n, p.child_by_field_name("left"))
        return p.type in ("as_pattern_target", "named_expression") and (
            p.type != "named_expression" or is_field(n, "name"))
    if lang is JS:
        n = _pattern_top(lang, n)
        p = n.parent
        if p is not None and p.type == "for_in_statement" and is_field(n, "left"):  # for (const s of xs)
            return any(c.type in ("const", "let", "var") for c in p.children)
        if p is not None and p.type == "catch_clause" and is_field(n, "parameter"):
            return True
        return p is not None and p.type == "variable_declarator" and is_field(n, "name")
    if lang is GO:
        if p.type in ("var_spec", "const_spec") and is_field(n, "name"):
            return True
        return p.type == "expression_list" and p.parent is not None and p.parent.type in (
            "short_var_declaration", "range_clause") and is_field(p, "left")
    return p.type in ("let_declaration", "for_expression") and is_field(n, "pattern")


def _is_use(lang: Lang, t: Text, n: ts.Node) -> bool:
    """An identifier that names a variable (not an attribute, not a keyword argument's name)."""
    p = n.parent
    if p is None:
        return False
    if lang.attribute and p.type == lang.attribute and is_field(n, lang.attr_field):
        return False
    return not (p.type == "keyword_argument" and is_field(n, "name"))


def _uses(lang: Lang, t: Text, scope: ts.Node, name: str, ident_type: str, shorthand: set[int]
          ) -> list[tuple[int, int]]:
    """The old name's uses in `scope` that the binding reaches (nested rebinding scopes out);
    the starts of those that are JS shorthand properties (`{ name }`) go in `shorthand`."""
    nodes = [n for n in word_nodes(t, scope, name) if n.type == ident_type
             or (lang is JS and ident_type == "identifier" and (n.type == "shorthand_property_identifier" or (
                 n.type == "shorthand_property_identifier_pattern" and assigned_shorthand(n))))]
    rebinding: set[int] = set()
    for n in nodes:
        if t.guard is not None:
            t.guard.check()
        s = _binding_scope(lang, t, n)
        if s is not None and s.id != scope.id and inside(s, scope):
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
            if n.type.startswith("shorthand_property_identifier"):
                shorthand.add(out[-1][0])
    return out


def _outer_iterable(n: ts.Node, comp: ts.Node) -> bool:
    """A Python comprehension's first iterable is evaluated outside its scope."""
    first = next((c for c in comp.named_children if c.type == "for_in_clause"), None)
    return first is not None and inside(n, first.child_by_field_name("right"))


def _attr_uses(lang: Lang, t: Text, scope: ts.Node, name: str) -> list[tuple[int, int]]:
    """`self.name` / `this.name` in `scope` (a class)."""
    out: list[tuple[int, int]] = []
    for n in word_nodes(t, scope, name):
        p = n.parent
        if p is not None and p.type == lang.attribute and is_field(n, lang.attr_field):
            obj = p.child_by_field_name(lang.object_field)
            if obj is not None and t.of(obj) in lang.self_names:
                out.append((t.char(n.start_byte), t.char(n.end_byte)))
    return out
