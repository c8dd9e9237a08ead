"""Parameter changes (`llada_lsp.edit_analysis`): the parameter names of one function before
and after the edit, and its calls' arguments to follow: an insertion point for an added one
(the model writes it), the argument to delete, or the arguments in their new order."""

from __future__ import annotations

import tree_sitter as ts

from llada_lsp.edit_syntax import Lang, Site, Text, inside, is_field, word_nodes


def param_change(lang: Lang, ot: Text, nt: Text, a: int, bo: int, bn: int, old_tree: ts.Tree, new_tree: ts.Tree
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


def _param_names(lang: Lang, t: Text, plist: ts.Node) -> list[str]:
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


def _calls(lang: Lang, t: Text, tree: ts.Tree, fname: str, fn: ts.Node, skip: int) -> list[ts.Node]:
    """The argument lists of the calls of `fname` (plain; `self.fname` for a method)."""
    out: list[ts.Node] = []
    scope = tree.root_node
    for n in word_nodes(t, scope, fname):
        if inside(n, fn.child_by_field_name("name")):
            continue
        p = n.parent
        callee = n
        if p is not None and lang.attribute and p.type == lang.attribute and is_field(n, lang.attr_field):
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


def _insert_at(t: Text, args: ts.Node, i: int, n_old: int, name: str) -> Site | None:
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


def _remove_at(t: Text, args: ts.Node, i: int, n_old: int) -> Site | None:
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


def _reorder(t: Text, args: ts.Node, perm: list[int]) -> Site | None:
    pos = _positional(args)
    if pos is None or len(pos) != len(perm):
        return None
    a, b = pos[0].start_byte, pos[-1].end_byte
    seps = [t.data[pos[k].end_byte:pos[k + 1].start_byte].decode("utf-8", "surrogatepass")
            for k in range(len(pos) - 1)]
    parts = [t.of(pos[j]) for j in perm]
    text = parts[0] + "".join(s + x for s, x in zip(seps, parts[1:], strict=True))
    return Site(t.char(a), t.char(b), text)
