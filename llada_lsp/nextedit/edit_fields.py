"""A field added to a record type (`llada_lsp.nextedit.edit_analysis`): its constructors in the file get
the value inserted, the field's name as a placeholder for the model or the user to replace.

- Python `@dataclass` classes and `NamedTuple` classes: an annotated class-level name without
  a default (`ClassVar`s are no fields). Each `Name(...)` call gets the argument at the field's
  position: positional where the call passes the fields before it positionally, else
  `field=field` (and always for `kw_only=True`). A field with a default needs nothing.
- Go structs: each keyed composite literal `Name{K: v, ...}` that sets every old field gets
  `Field: Field` after the field before it (an unkeyed, empty or partial literal is left as it
  is: Go zero-fills what it leaves out, on purpose).
- Rust structs: each struct expression `Name { .. }` (or `Self { .. }` in its impl) gets
  `field: field`; one with a `..base` is complete already.
Only one field added (the others kept in order) is this kind.

And a changed return shape, Python: `return a, b` became `return a, b, c` in a function (one
value added to a returned tuple, the others kept in order). Its calls unpacked into targets,
`x, y = f(...)` or `(x, y) = self.f(...)`, get a new target at the value's position: the added
value's name when it is a plain name, else `_`, as a placeholder (`Site.hint`) to type over.
Only the return statement being edited is read (a function whose other returns still give the
old shape is the user's next edit).
"""

from __future__ import annotations

import re
from collections.abc import Callable

import tree_sitter as ts

from llada_lsp.nextedit.edit_params import calls_of, insert_arg
from llada_lsp.nextedit.edit_syntax import (
    GO,
    PY,
    RUST,
    WORD,
    Lang,
    Site,
    Text,
    ancestor,
    is_field,
    word_nodes,
)

RECORDS = {PY: "class_definition", GO: "type_spec", RUST: "struct_item"}
_DATACLASS = re.compile(r"@\s*(?:dataclasses\s*\.\s*)?dataclass\b")


def field_change(lang: Lang, ot: Text, nt: Text, a: int, bo: int, bn: int, old_tree: Callable[[], ts.Tree],
                 new_tree: ts.Tree) -> tuple[str, str, tuple[Site, ...], tuple[int, int] | None] | None:
    kind = RECORDS.get(lang)
    if kind is None:
        return None
    x, y = _trimmed(nt, a, bn)
    nrec = _record(new_tree, nt.byte(x), nt.byte(y), kind)
    name_node = nrec.child_by_field_name("name") if nrec is not None else None
    if nrec is None or name_node is None:
        return None
    nf = _fields(lang, nt, nrec)  # None for a class that is no record: before any file scan
    if nf is None:
        return None
    name = nt.of(name_node)
    built = _py_calls(nt, new_tree, name, nrec) if lang is PY else _literals(lang, nt, new_tree, name)  # limits first
    # the same record before the edit (the changed stretch may start just past its old end)
    olds = [n.parent for n in word_nodes(ot, old_tree().root_node, name)
            if n.parent is not None and n.parent.type == kind and is_field(n, "name")]
    orec = min(olds, key=lambda n: abs(n.start_byte - nrec.start_byte), default=None)
    of_ = _fields(lang, ot, orec) if orec is not None else None
    if of_ is None:
        return None
    nn, on = [f for f, _ in nf[0]], [f for f, _ in of_[0]]
    if len(nn) != len(on) + 1 or [x for x in nn if x in on] != on:
        return None
    i = next(k for k in range(len(nn)) if k >= len(on) or nn[k] != on[k])
    field = nn[i]
    definition = (nt.char(nrec.start_byte), nt.char(min(nrec.end_byte, nrec.start_byte + 2000)))
    if nf[0][i][1]:
        return "field_added", f"{name}: +{field} at {i} (has a default)", (), definition
    if lang is PY:
        sites = [s for c in built
                 if (s := insert_arg(nt, c, i, len(on), field, True, nf[1])) is not None]
    else:
        label = f"{field}: "
        sites = [s for body in built
                 if (s := _insert_keyed(lang, nt, body, nn[:i], on, field, label)) is not None]
    return "field_added", f"{name}: +{field} at {i}", tuple(sites), definition


def _trimmed(t: Text, a: int, b: int) -> tuple[int, int]:
    """The changed stretch [a, b) of `t` without its leading and trailing whitespace."""
    while a < b and t.text[a].isspace():
        a += 1
    while b > a and t.text[b - 1].isspace():
        b -= 1
    return a, b


def _record(tree: ts.Tree, b0: int, b1: int, kind: str) -> ts.Node | None:
    n: ts.Node | None = tree.root_node.descendant_for_byte_range(b0, max(b0, b1))
    while n is not None and n.type != kind:
        n = n.parent
    return n


def _fields(lang: Lang, t: Text, rec: ts.Node) -> tuple[list[tuple[str, bool]], bool] | None:
    """([(field name, has a default)] in order, keyword-only) of a record, None when it is not one."""
    if lang is PY:
        return _py_fields(t, rec)
    body = rec.child_by_field_name("type") if lang is GO else rec.child_by_field_name("body")
    if lang is GO and body is not None and body.type == "struct_type":
        body = next((c for c in body.named_children if c.type == "field_declaration_list"), None)
    if body is None or body.type != "field_declaration_list":
        return None
    out: list[tuple[str, bool]] = []
    for c in body.named_children:
        if c.type != "field_declaration":
            continue
        names = c.children_by_field_name("name")
        if not names:  # a Go embedded field: named by its type
            ty = c.child_by_field_name("type")
            names = [ty] if ty is not None else []
        out += [(t.of(n).rsplit(".", 1)[-1].lstrip("*"), False) for n in names]
    return out, False


def _py_fields(t: Text, cls: ts.Node) -> tuple[list[tuple[str, bool]], bool] | None:
    deco = cls.parent if cls.parent is not None and cls.parent.type == "decorated_definition" else None
    decorators = [t.of(d) for d in deco.named_children if d.type == "decorator"] if deco is not None else []
    dc = next((d for d in decorators if _DATACLASS.match(d)), None)
    supers = cls.child_by_field_name("superclasses")
    named_tuple = supers is not None and any(t.of(x).rsplit(".", 1)[-1] == "NamedTuple" for x in supers.named_children)
    body = cls.child_by_field_name("body")
    if (dc is None and not named_tuple) or body is None:
        return None
    out: list[tuple[str, bool]] = []
    for st in body.named_children:
        if st.type != "expression_statement" or not st.named_children:
            continue
        asg = st.named_children[0]
        left, ty = asg.child_by_field_name("left"), asg.child_by_field_name("type")
        if asg.type != "assignment" or left is None or ty is None or left.type != "identifier":
            continue
        if t.of(ty).startswith(("ClassVar", "typing.ClassVar")):
            continue
        if t.of(ty) in ("KW_ONLY", "dataclasses.KW_ONLY") or t.of(ty).startswith("InitVar"):
            return None  # where the fields after it go is beyond this analysis
        out.append((t.of(left), asg.child_by_field_name("right") is not None))
    kw_only = dc is not None and re.search(r"kw_only\s*=\s*True", dc) is not None
    return out, kw_only


def _py_calls(t: Text, tree: ts.Tree, name: str, cls: ts.Node) -> list[ts.Node]:
    out: list[ts.Node] = []
    for n in word_nodes(t, tree.root_node, name):
        p = n.parent
        if n.type == "identifier" and p is not None and p.type == "call" and is_field(n, "function"):
            args = p.child_by_field_name("arguments")
            if args is not None and args.type == "argument_list":
                out.append(args)
    return out


def _literals(lang: Lang, t: Text, tree: ts.Tree, name: str) -> list[ts.Node]:
    """The bodies of the file's keyed Go composite literals / Rust struct expressions of `name`."""
    out: list[ts.Node | None] = []
    words = word_nodes(t, tree.root_node, name) + (word_nodes(t, tree.root_node, "Self") if lang is RUST else [])
    for n in words:
        p = n.parent
        if lang is GO and p is not None and p.type == "composite_literal" and is_field(n, "type"):
            out.append(p.child_by_field_name("body"))
        elif lang is RUST and p is not None and p.type == "struct_expression" and is_field(n, "name"):
            if t.of(n) == "Self" and _impl_type(t, p) != name:
                continue
            out.append(p.child_by_field_name("body"))
    return [b for b in out if b is not None]


def _impl_type(t: Text, n: ts.Node) -> str:
    p = ancestor(n, frozenset({"impl_item"}))
    ty = p.child_by_field_name("type") if p is not None else None
    return t.of(ty) if ty is not None else ""


def _key(lang: Lang, t: Text, e: ts.Node) -> str | None:
    if lang is GO:
        return t.of(e.named_children[0]) if e.type == "keyed_element" and e.named_children else None
    if e.type == "field_initializer":
        f = e.child_by_field_name("field")
        return t.of(f) if f is not None else None
    return t.of(e) if e.type == "shorthand_field_initializer" else None


def _indent(t: Text, n: ts.Node) -> str:
    line = t.data.rfind(b"\n", 0, n.start_byte) + 1
    return re.match(rb"[ \t]*", t.data[line:n.start_byte]).group(0).decode()  # type: ignore[union-attr]


def _insert_keyed(lang: Lang, t: Text, body: ts.Node, before: list[str], old: list[str], field: str, label: str
                  ) -> Site | None:
    """`label + field` inserted into a keyed literal body after the last field of `before` it
    holds (else first), on its own line when the literal spans lines. A Go literal that leaves
    out some of the `old` fields relies on zero values: it is left as it is."""
    elems = [c for c in body.named_children if c.type not in ("comment", "line_comment", "block_comment")]
    if any(c.type == "base_field_initializer" for c in elems):
        return None
    keys = [_key(lang, t, e) for e in elems]
    if field in keys or any(k is None for k in keys):
        return None  # given already, or not keyed
    if lang is GO and not set(old) <= set(keys):
        return None
    if not elems:
        if lang is GO or t.of(body).strip("{} \t") != "":
            return None  # Go: an empty literal is the zero value
        at = t.char(body.start_byte) + 1
        return Site(at, at, None, " " + label, " " if t.of(body) == "{}" else "", field)
    j = max((k for k, key in enumerate(keys) if key in before), default=-1)
    multi = body.start_point[0] != body.end_point[0]
    if j < 0:
        at = t.char(elems[0].start_byte)
        return Site(at, at, None, label, ",\n" + _indent(t, elems[0]) if multi else ", ", field)
    e = elems[j]
    comma = e.next_sibling if e.next_sibling is not None and e.next_sibling.type == "," else None
    if multi and comma is not None:
        at = t.char(comma.end_byte)
        return Site(at, at, None, "\n" + _indent(t, e) + label, ",", field)
    at = t.char(e.end_byte)
    return Site(at, at, None, (",\n" + _indent(t, e) if multi else ", ") + label, "", field)


# ---------------------------------------------------------------- return shapes

def return_change(lang: Lang, ot: Text, nt: Text, a: int, bo: int, bn: int, old_tree: Callable[[], ts.Tree],
                  new_tree: ts.Tree) -> tuple[str, str, tuple[Site, ...], tuple[int, int] | None] | None:
    if lang is not PY:
        return None
    x, y = _trimmed(nt, a, bn)
    ob0, ob1 = ot.byte(min(x, len(ot.text))), ot.byte(min(max(x, bo), len(ot.text)))
    if ob1 <= ob0:  # a pure insertion: the old node just before it
        ob0 = ob1 = max(0, ob0 - 1)
    nret = _returned(new_tree, nt.byte(x), nt.byte(y))
    fn = ancestor(nret, frozenset({"function_definition"})) if nret is not None else None
    name_node = fn.child_by_field_name("name") if fn is not None else None
    if nret is None or fn is None or name_node is None:
        return None
    params = fn.child_by_field_name("parameters")
    skip = 1 if params is not None and params.named_children and nt.of(params.named_children[0]) in PY.self_names else 0
    calls = calls_of(lang, nt, new_tree, nt.of(name_node), fn, skip)  # the new text's side first: its limits
    oret = _returned(old_tree(), ob0, ob1)
    if oret is None or ancestor(oret, frozenset({"function_definition"})) is None:
        return None
    new_vals, old_vals = _values(nt, nret), _values(ot, oret)
    if len(old_vals) < 2 or len(new_vals) != len(old_vals) + 1:
        return None
    i = next(k for k in range(len(new_vals)) if k >= len(old_vals) or new_vals[k] != old_vals[k])
    if new_vals[:i] + new_vals[i + 1:] != old_vals:
        return None
    hint = new_vals[i] if WORD.fullmatch(new_vals[i]) else "_"
    sites: list[Site] = []
    for args in calls:
        call = args.parent
        asg = call.parent if call is not None else None
        if call is None or asg is None or asg.type != "assignment" or not is_field(call, "right"):
            continue
        left = asg.child_by_field_name("left")
        targets = [c for c in left.named_children if c.type != "comment"] if left is not None else []
        if left is None or left.type not in ("pattern_list", "tuple_pattern") or len(targets) != len(old_vals) \
                or any(c.type in ("list_splat_pattern", "list_splat") for c in targets):
            continue
        if i < len(targets):
            at = nt.char(targets[i].start_byte)
            sites.append(Site(at, at, None, "", ", ", hint))
        else:
            at = nt.char(targets[-1].end_byte)
            sites.append(Site(at, at, None, ", ", "", hint))
    body = fn.child_by_field_name("body")
    definition = (nt.char(fn.start_byte), nt.char(body.start_byte if body is not None else fn.end_byte))
    return "return_added", f"{nt.of(name_node)}: returns +{new_vals[i]} at {i}", tuple(sites), definition


def _returned(tree: ts.Tree, b0: int, b1: int) -> ts.Node | None:
    """The returned tuple (`expression_list`) of the return statement holding [b0, b1]."""
    n: ts.Node | None = tree.root_node.descendant_for_byte_range(b0, max(b0, b1))
    while n is not None and n.type != "return_statement":
        if n.type in ("function_definition", "class_definition", "module"):
            return None
        n = n.parent
    if n is None or not n.named_children or n.named_children[0].type != "expression_list":
        return None
    return n.named_children[0]


def _values(t: Text, tup: ts.Node) -> list[str]:
    return [t.of(c) for c in tup.named_children if c.type != "comment"]
