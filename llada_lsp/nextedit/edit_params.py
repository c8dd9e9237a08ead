"""Parameter changes (`llada_lsp.nextedit.edit_analysis`): the parameter names of one function before
and after the edit, and its calls' arguments to follow: an insertion point for an added one
without a default (the model writes it, or its name stays as a placeholder), the argument to
delete, or the arguments in their new order. Python calls may pass keywords: a removed
parameter passed by keyword is deleted, keywords need no reordering, an added parameter after
a keyword-passed one goes in as `name=name`. Methods are followed at `self.m(...)`-style
calls, and (JS, Go, Rust) at `x.m(...)` when the method's name is unique in the file."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import tree_sitter as ts

from llada_lsp.nextedit.edit_limits import Refused
from llada_lsp.nextedit.edit_syntax import PY, RUST, Lang, Site, Text, inside, is_field, word_nodes


def param_change(lang: Lang, ot: Text, nt: Text, a: int, bo: int, bn: int, old_tree: Callable[[], ts.Tree],
                 new_tree: ts.Tree) -> tuple[str, str, tuple[Site, ...], tuple[int, int] | None] | None:
    nl = _param_list(lang, new_tree, nt.byte(a), nt.byte(bn))
    if nl is None:
        return None
    fn = nl.parent
    name_node = fn.child_by_field_name("name") if fn is not None else None
    if fn is None or name_node is None:
        return None
    fname = nt.of(name_node)
    nparams = _params(lang, nt, nl)
    skip = 1 if nparams and nparams[0].name in lang.self_names else 0
    calls = calls_of(lang, nt, new_tree, fname, fn, skip)  # the new text's side first: its limits
    ol = _param_list(lang, old_tree(), ot.byte(a), ot.byte(bo))
    if ol is None:
        return None
    oparams = [x for x in _params(lang, ot, ol) if x.name not in lang.self_names]
    nparams = [x for x in nparams if x.name not in lang.self_names]
    on, nn = [x.name for x in oparams], [x.name for x in nparams]
    body = fn.child_by_field_name("body")  # the signature is what a call needs to see
    definition = (nt.char(fn.start_byte), nt.char(body.start_byte if body is not None else fn.end_byte))
    kw = lang is PY  # keyword arguments exist
    if len(nn) == len(on) + 1 and [x for x in nn if x in on] == on:
        i = next(k for k in range(len(nn)) if k >= len(on) or nn[k] != on[k])
        if nparams[i].optional:  # a default (or *args): the calls need nothing
            return "param_added", f"{fname}: +{nn[i]} at {i} (optional)", (), definition
        sites = [s for c in calls if (s := insert_arg(nt, c, i, len(on), nn[i], kw, nparams[i].kw_only)) is not None]
        return "param_added", f"{fname}: +{nn[i]} at {i}", tuple(sites), definition
    if len(on) == len(nn) + 1 and [x for x in on if x in nn] == nn:
        i = next(k for k in range(len(on)) if k >= len(nn) or nn[k] != on[k])
        sites = [s for c in calls if (s := _remove_at(nt, c, i, len(on), on[i], kw)) is not None]
        return "param_removed", f"{fname}: -{on[i]} at {i}", tuple(sites), definition
    if len(on) == len(nn) and sorted(on) == sorted(nn) and on != nn:
        perm = [on.index(x) for x in nn]
        sites = [s for c in calls if (s := _reorder(nt, c, perm, kw)) is not None]
        return "param_reordered", f"{fname}: {', '.join(nn)}", tuple(sites), definition
    return None


def _param_list(lang: Lang, tree: ts.Tree, b0: int, b1: int) -> ts.Node | None:
    n = tree.root_node.descendant_for_byte_range(b0, max(b0, b1))
    while n is not None and n.type not in lang.params:
        if n.type in lang.functions or n.type in lang.scopes:
            return None
        n = n.parent
    if n is None or n.parent is None or n.parent.type not in lang.functions \
            or n.parent.child_by_field_name("parameters") != n:  # not a Go method's receiver
        return None
    return n if n.start_byte <= b0 and b1 <= n.end_byte else None


@dataclass(frozen=True)
class Param:
    name: str
    optional: bool = False  # a default, or a rest/variadic parameter: a call may leave it out
    kw_only: bool = False  # Python: after `*` or `*args`


_OPTIONAL = frozenset({"default_parameter", "typed_default_parameter", "assignment_pattern", "optional_parameter",
                       "list_splat_pattern", "dictionary_splat_pattern", "rest_pattern",
                       "variadic_parameter_declaration"})


def _params(lang: Lang, t: Text, plist: ts.Node) -> list[Param]:
    out: list[Param] = []
    kw_only = False
    for c in plist.named_children:
        if c.type in ("comment", "line_comment", "block_comment"):
            continue
        if c.type == "keyword_separator":
            kw_only = True
            continue
        optional = c.type in _OPTIONAL or (c.type == "required_parameter" and c.child_by_field_name("value") is not None)
        if c.type in ("identifier", "self_parameter", "self"):
            out.append(Param("self" if c.type in ("self_parameter", "self") else t.of(c), optional, kw_only))
            continue
        names = [x for x in (c.children_by_field_name("name") or c.children_by_field_name("pattern")
                             or c.children_by_field_name("left")) if x is not None]
        if not names and c.named_children:
            names = [c.named_children[0]]
        for x in names:
            while x.type not in ("identifier", "self") and x.named_children:
                x = x.named_children[0]
            out.append(Param(t.of(x), optional, kw_only))
        kw_only = kw_only or c.type == "list_splat_pattern"
    return out


# a method call's callee node type -> (its name field, its receiver field)
CALLEE = {"attribute": ("attribute", "object"), "member_expression": ("property", "object"),
          "selector_expression": ("field", "operand"), "field_expression": ("field", "value")}


def _defined(lang: Lang, t: Text, root: ts.Node, name: str) -> int:
    """How many functions or methods of the file are named `name`."""
    return sum(1 for n in word_nodes(t, root, name)
               if n.parent is not None and n.parent.type in lang.functions and is_field(n, "name"))


def _owner(fn: ts.Node) -> str | None:
    """The class (JS, Python) or impl type (Rust) a method is defined in, None for a function."""
    p = fn.parent
    while p is not None and p.type in ("decorated_definition", "block", "class_body", "declaration_list"):
        p = p.parent
    if p is not None and p.type in ("class_definition", "class_declaration", "class"):
        n = p.child_by_field_name("name")
        return (n.text or b"").decode() if n is not None else ""
    if p is not None and p.type == "impl_item":
        n = p.child_by_field_name("type")
        return (n.text or b"").decode() if n is not None else ""
    return None


def calls_of(lang: Lang, t: Text, tree: ts.Tree, fname: str, fn: ts.Node, skip: int) -> list[ts.Node]:
    """The argument lists of the calls of `fname` in the file. A function: plain calls. A
    method: `self.m(...)` / `this.m(...)` / `Self::m(...)` / `Owner.m(...)`, and, outside Python,
    `x.m(...)` with any receiver when no other function of the file has that name (its type is
    not known: precision first); Python: `x.m(...)` where every binding of `x` in its scope
    makes it an instance of the method's class (`_instance_of`). A Python method without
    `self` first is followed nowhere."""
    out: list[ts.Node] = []
    root = tree.root_node
    owner = _owner(fn)
    known: dict[tuple[int, str], bool | None] = {}  # (scope, name) -> bound to an owner there (None: unbound)
    method = fn.type == "method_declaration" or owner is not None
    if method and lang is PY and not skip:
        return []
    unique = method and lang is not PY and _defined(lang, t, root, fname) == 1
    receivers = set(lang.self_names) | ({owner, "Self"} if owner and lang is not PY else set())
    for n in word_nodes(t, root, fname):
        if inside(n, fn.child_by_field_name("name")):
            continue
        p, callee = n.parent, n
        if p is None:
            continue
        if p.type in CALLEE and is_field(n, CALLEE[p.type][0]):
            obj = p.child_by_field_name(CALLEE[p.type][1])
            if not method or obj is None or not (t.of(obj) in receivers or unique
                                                 or (lang is PY and owner and _instance_of(t, obj, owner, known))):
                continue
            if lang is RUST and not skip and t.of(obj) != "self":
                continue  # an associated function is called by path (`Self::m`)
            callee, p = p, p.parent
        elif p.type == "scoped_identifier" and is_field(n, "name"):
            path = p.child_by_field_name("path")
            if not method or skip or path is None or t.of(path) not in receivers - {"self"}:
                continue
            callee, p = p, p.parent
        elif method:
            continue
        if p is None or p.type not in lang.calls or p.child_by_field_name("function") != callee:
            continue
        args = p.child_by_field_name("arguments")
        if args is not None:
            out.append(args)
    return out


_PY_SCOPES = frozenset({"function_definition", "lambda"})


def _scope_of(n: ts.Node) -> ts.Node:
    """The function whose local `n` is (or the module)."""
    p = n.parent
    while p is not None and p.type not in _PY_SCOPES and p.parent is not None:
        p = p.parent
    return p if p is not None else n


def _instance_of(t: Text, obj: ts.Node, owner: str, known: dict[tuple[int, str], bool | None]) -> bool:
    """Python: whether the receiver `obj` (a name) is an instance of class `owner`: in the
    innermost function (or the module) that binds it, every binding is `x = Owner(...)` (or
    `x = cls(...)` inside Owner) or a parameter annotated `x: Owner` (no other assignment,
    unannotated parameter, loop target). A name too frequent to scan (the site limit) is not known."""
    if obj.type != "identifier":
        return False
    name, scope = t.of(obj), _scope_of(obj)
    while True:
        key = (scope.id, name)
        if key not in known:
            try:
                binds = [k for n in word_nodes(t, scope, name) if _scope_of(n).id == scope.id
                         and (k := _binds_as(t, n, owner)) is not None]
            except Refused:
                binds = [False]
            known[key] = all(binds) if binds else None  # None: not bound here
        if (got := known[key]) is not None:
            return got
        outer = _scope_of(scope)
        if outer.id == scope.id:
            return False
        scope = outer


def _owner_class(t: Text, n: ts.Node) -> str:
    p = n.parent
    while p is not None and p.type != "class_definition":
        p = p.parent
    name = p.child_by_field_name("name") if p is not None else None
    return t.of(name) if name is not None else ""


def _binds_as(t: Text, n: ts.Node, owner: str) -> bool | None:
    """None when `n` binds nothing; else whether it binds an instance of `owner`."""
    p = n.parent
    if p is None or n.type != "identifier":
        return None
    if p.type == "assignment" and is_field(n, "left"):
        value = p.child_by_field_name("right")
        fn = value.child_by_field_name("function") if value is not None and value.type == "call" else None
        if fn is not None and t.of(fn) in ("cls", "self.__class__", "type(self)"):  # inside the owner class only
            return _owner_class(t, n) == owner
        return fn is not None and t.of(fn) == owner
    if p.type in ("typed_parameter", "typed_default_parameter") and p.named_children and p.named_children[0] == n:
        ty = p.child_by_field_name("type")
        return ty is not None and t.of(ty).strip("'\"") == owner
    if p.type in ("parameters", "lambda_parameters", "default_parameter", "pattern_list", "tuple_pattern",
                  "list_pattern", "as_pattern_target", "augmented_assignment", "for_statement", "for_in_clause",
                  "named_expression", "global_statement", "nonlocal_statement", "with_item", "list_splat_pattern",
                  "dictionary_splat_pattern", "import_statement", "import_from_statement", "aliased_import",
                  "dotted_name", "except_clause", "keyword_argument"):
        if p.type == "keyword_argument" or (p.type == "dotted_name" and p.parent is not None
                                             and p.parent.type not in ("import_statement", "aliased_import")):
            return None
        if p.type in ("for_statement", "for_in_clause", "augmented_assignment") and not is_field(n, "left"):
            return None
        if p.type == "named_expression" and not is_field(n, "name"):
            return None
        return False  # bound some other way: the class is not known
    return None


def _split(args: ts.Node) -> tuple[list[ts.Node], list[ts.Node]] | None:
    """(positional, keyword) arguments of a call, None when it unpacks (`*xs`, `**kw`, spread)."""
    pos: list[ts.Node] = []
    kws: list[ts.Node] = []
    for c in args.named_children:
        if c.type in ("comment", "line_comment", "block_comment"):
            continue
        if c.type in ("list_splat", "dictionary_splat", "spread_element", "generator_expression",
                      "variadic_argument"):
            return None
        if c.type == "keyword_argument":
            kws.append(c)
        elif kws:
            return None  # a positional after a keyword: not valid Python
        else:
            pos.append(c)
    return pos, kws


def _kw_name(t: Text, kw: ts.Node) -> str:
    n = kw.child_by_field_name("name")
    return t.of(n) if n is not None else ""


def insert_arg(t: Text, args: ts.Node, i: int, n_old: int, name: str, kw: bool, kw_only: bool = False
               ) -> Site | None:
    """The insertion of argument `i` (of `n_old` before it) named `name`: positional where the
    call passes the arguments before it positionally, else (`kw`: Python) `name=` after the
    last argument."""
    got = _split(args)
    if got is None:
        return None
    pos, kws = got
    if not kw and (kws or len(pos) != n_old):
        return None  # defaults in use: where the argument goes is not known
    if len(pos) + len(kws) > n_old or any(_kw_name(t, k) == name for k in kws):
        return None  # already given
    if not kw_only and i < len(pos):
        at = t.char(pos[i].start_byte)
        return Site(at, at, None, "", ", ", name)
    if not kw_only and i == len(pos) and pos and not kws:
        at = t.char(pos[-1].end_byte)
        return Site(at, at, None, ", ", "", name)
    if not kw_only and i == len(pos) == 0 and not kws:
        at = t.char(args.start_byte) + 1
        return Site(at, at, None, "", "", name)
    if not kw:
        return None
    items = pos + kws
    if items:
        at = t.char(items[-1].end_byte)
        return Site(at, at, None, f", {name}=", "", name)
    at = t.char(args.start_byte) + 1
    return Site(at, at, None, f"{name}=", "", name)


def _remove_at(t: Text, args: ts.Node, i: int, n_old: int, name: str, kw: bool) -> Site | None:
    got = _split(args)
    if got is None:
        return None
    pos, kws = got
    if not kw and (kws or len(pos) != n_old):
        return None
    items = pos + kws
    k = next((len(pos) + j for j, x in enumerate(kws) if _kw_name(t, x) == name), None)
    if k is None and i < len(pos) <= n_old:
        k = i
    if k is None:
        return None  # not passed (a default)
    if len(items) == 1:
        a, b = items[0].start_byte, items[0].end_byte
    elif k + 1 < len(items):
        a, b = items[k].start_byte, items[k + 1].start_byte
    else:
        a, b = items[k - 1].end_byte, items[k].end_byte
    return Site(t.char(a), t.char(b), "")


def _reorder(t: Text, args: ts.Node, perm: list[int], kw: bool) -> Site | None:
    """The positional arguments in their new order (keyword ones stay as they are)."""
    got = _split(args)
    if got is None:
        return None
    pos, kws = got
    if not pos or (not kw and (kws or len(pos) != len(perm))) or len(pos) + len(kws) > len(perm):
        return None
    k = len(pos)
    if any(j >= k for j in perm[:k]):
        return None  # a parameter passed by keyword or left to its default moves into the positional ones
    a, b = pos[0].start_byte, pos[-1].end_byte
    seps = [t.data[pos[j].end_byte:pos[j + 1].start_byte].decode("utf-8", "surrogatepass") for j in range(k - 1)]
    parts = [t.of(pos[j]) for j in perm[:k]]
    text = parts[0] + "".join(s + x for s, x in zip(seps, parts[1:], strict=True))
    return Site(t.char(a), t.char(b), text)
