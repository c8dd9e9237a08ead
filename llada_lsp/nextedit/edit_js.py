"""JavaScript/TypeScript details of a rename (`llada_lsp.nextedit.edit_analysis`), as TypeScript's own
rename does them:
- a parameter's JSDoc: `@param name`, `@param {T} name`, `@param [name=x]` in the `/** */`
  comment right before its function (or the `export`/`const` holding it);
- a TypeScript parameter property (`constructor(private x = 1)`): its `this.x` uses too;
- a shorthand property in a destructuring assignment (`({ x = 1 } = options)`): a use of the
  variable `x`, kept as `{ x: y }` (in a declaration, `const { x } = o` binds a new `x`).
"""

from __future__ import annotations

import re

import tree_sitter as ts

from llada_lsp.nextedit.edit_syntax import Text, ancestor, is_field

_PATTERNS = frozenset({"object_pattern", "object_assignment_pattern", "pair_pattern", "array_pattern",
                       "rest_pattern", "assignment_pattern"})
_HOLDERS = frozenset({"export_statement", "variable_declarator", "lexical_declaration", "variable_declaration"})


def jsdoc_param_sites(t: Text, fn: ts.Node, name: str) -> list[tuple[int, int]]:
    """The spans of `name` after `@param` in the JSDoc comment right before `fn`."""
    n = fn
    while n.parent is not None and n.parent.type in _HOLDERS:
        n = n.parent
    doc = n.prev_sibling
    if doc is None or doc.type != "comment" or not t.of(doc).startswith("/**"):
        return []
    pat = re.compile(rb"@param\s+(?:\{[^}\n]*\}\s*)?\[?(" + re.escape(name.encode()) + rb")(?![A-Za-z0-9_$])")
    body = t.data[doc.start_byte:doc.end_byte]
    return [(t.char(doc.start_byte + m.start(1)), t.char(doc.start_byte + m.end(1))) for m in pat.finditer(body)]


def parameter_property_class(n: ts.Node) -> ts.Node | None:
    """The class body of a TypeScript parameter property's constructor (`private x`,
    `readonly x`), None for another parameter."""
    p = n.parent
    if p is None or p.type not in ("required_parameter", "optional_parameter") or not is_field(n, "pattern"):
        return None
    if not any(c.type in ("accessibility_modifier", "readonly", "override_modifier") for c in p.children):
        return None
    return ancestor(p, frozenset({"class_body"}))


def assigned_shorthand(n: ts.Node) -> bool:
    """`n` (a shorthand_property_identifier_pattern) is a target of a destructuring assignment,
    not of a declaration."""
    top = n
    while top.parent is not None and top.parent.type in _PATTERNS:
        top = top.parent
    return top.parent is not None and top.parent.type == "assignment_expression" and is_field(top, "left")
