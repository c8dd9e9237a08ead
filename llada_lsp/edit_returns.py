"""A changed return shape (`llada_lsp.edit_analysis`), Python: `return a, b` became
`return a, b, c` in a function (one value added to a returned tuple, the others kept in
order). Its calls unpacked into targets, `x, y = f(...)` or `(x, y) = self.f(...)`, get a new
target at the value's position: the added value's name when it is a plain name, else `_`, as
a placeholder (`Site.hint`) to type over. Only the return statement being edited is read (a
function whose other returns still give the old shape is the user's next edit)."""

from __future__ import annotations

import tree_sitter as ts

from llada_lsp.edit_params import calls_of
from llada_lsp.edit_syntax import PY, WORD, Lang, Site, Text, ancestor, is_field


def return_change(lang: Lang, ot: Text, nt: Text, a: int, bo: int, bn: int, old_tree: ts.Tree, new_tree: ts.Tree
                  ) -> tuple[str, str, tuple[Site, ...], tuple[int, int] | None] | None:
    if lang is not PY:
        return None
    x, y = a, bn
    while x < y and nt.text[x].isspace():
        x += 1
    while y > x and nt.text[y - 1].isspace():
        y -= 1
    ob0, ob1 = ot.byte(min(x, len(ot.text))), ot.byte(min(max(x, bo), len(ot.text)))
    if ob1 <= ob0:  # a pure insertion: the old node just before it
        ob0 = ob1 = max(0, ob0 - 1)
    nret, oret = _returned(new_tree, nt.byte(x), nt.byte(y)), _returned(old_tree, ob0, ob1)
    if nret is None or oret is None:
        return None
    fn = ancestor(nret, frozenset({"function_definition"}))
    name_node = fn.child_by_field_name("name") if fn is not None else None
    if fn is None or name_node is None or ancestor(oret, frozenset({"function_definition"})) is None:
        return None
    new_vals, old_vals = _values(nt, nret), _values(ot, oret)
    if len(old_vals) < 2 or len(new_vals) != len(old_vals) + 1:
        return None
    i = next(k for k in range(len(new_vals)) if k >= len(old_vals) or new_vals[k] != old_vals[k])
    if new_vals[:i] + new_vals[i + 1:] != old_vals:
        return None
    hint = new_vals[i] if WORD.fullmatch(new_vals[i]) else "_"
    params = fn.child_by_field_name("parameters")
    skip = 1 if params is not None and params.named_children and nt.of(params.named_children[0]) in PY.self_names else 0
    sites: list[Site] = []
    for args in calls_of(lang, nt, new_tree, nt.of(name_node), fn, skip):
        call = args.parent
        asg = call.parent if call is not None else None
        if asg is None or asg.type != "assignment" or not is_field(call, "right"):
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
