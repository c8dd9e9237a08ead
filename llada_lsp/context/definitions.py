"""Definitions in a file, found with tree-sitter: the names a file defines at its top level
and in its classes (functions, methods, classes, types, constants), with their line spans.

Workspace context (`llada_lsp.context.workspace`) looks up the names used near the cursor here, in
other files, and puts their definitions in the prompt. Function bodies are not entered
(their locals are no use to another file), so a walk costs about one node per top-level
statement and class member. Grammars come from `llada_lsp.text.syntax`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from llada_lsp.text.syntax import parser_for

# nodes that define a name and are not entered (functions: their bodies hold locals only)
LEAVES = frozenset({
    "function_definition", "function_declaration", "generator_function_declaration",
    "method_definition", "method_declaration", "constructor_declaration", "function_item",
    "function_signature_item", "struct_item", "enum_item", "union_item", "type_item", "const_item",
    "static_item", "macro_definition", "type_alias_declaration", "enum_declaration", "type_spec",
    "const_spec", "var_spec", "record_declaration", "preproc_def", "preproc_function_def",
    "struct_specifier", "enum_specifier", "type_definition", "variable_declarator", "assignment",
    "assignment_statement",
})
# variables: defined at the top level only (not a class's fields)
VARIABLES = frozenset({"assignment", "assignment_statement", "variable_declarator", "const_spec", "var_spec",
                       "const_item", "static_item"})
# nodes that define a name and hold more definitions (methods)
CONTAINERS = frozenset({
    "class_definition", "class_declaration", "abstract_class_declaration", "interface_declaration",
    "trait_item", "mod_item", "namespace_definition", "class_specifier",
})
# nodes entered without defining anything themselves
TRANSPARENT = frozenset({
    "module", "program", "source_file", "translation_unit", "chunk", "export_statement",
    "decorated_definition", "type_declaration", "const_declaration", "var_declaration",
    "lexical_declaration", "variable_declaration", "declaration_list", "class_body", "block",
    "interface_body", "template_declaration", "expression_statement", "impl_item",
    "field_declaration_list",
})
# transparent nodes that wrap one definition: its decorators and doc comment are theirs
WRAPPERS = frozenset({"decorated_definition", "export_statement", "lexical_declaration", "variable_declaration",
                      "type_declaration", "const_declaration", "var_declaration", "template_declaration"})
NAME_TYPES = frozenset({"identifier", "type_identifier", "field_identifier", "property_identifier",
                        "constant", "name"})
MAX_DEPTH = 8
MAX_DEFINITIONS = 2000  # per file
MAX_DEF_LINES = 30  # a definition's chunk at most; longer classes become a skeleton


@dataclass(frozen=True, slots=True)
class Definition:
    """`name` is defined on lines start..end (0-based, inclusive, with the decorators and doc
    comments just above); `members`: the first lines of the definitions inside it."""

    name: str
    start: int
    end: int
    members: tuple[int, ...] = ()


def _last_part(text: str) -> str:
    for sep in ("::", ".", ":"):
        text = text.rsplit(sep, 1)[-1]
    return text


def name_of(node: Any) -> str | None:
    """The name `node` defines, or None (a destructuring pattern, an operator...)."""
    target = node.child_by_field_name("name")
    if target is None and node.type in ("assignment", "assignment_statement"):
        target = node.child_by_field_name("left")
        if target is not None and target.type == "variable_list" and target.named_child_count == 1:
            target = target.named_children[0]
    depth = 0
    while target is None or target.type not in (*NAME_TYPES, "qualified_identifier", "dot_index_expression",
                                                "method_index_expression"):
        if depth > 4:
            return None
        source = node if target is None else target
        target = source.child_by_field_name("declarator")  # C: int *f(void) -> f
        if target is None:
            return None
        node, depth = target, depth + 1
    name = _last_part(target.text.decode("utf-8", "replace"))
    return name if name.isidentifier() else None


def _start(node: Any) -> int:
    """The first line of a definition, with its decorators and the doc comments right above."""
    while node.parent is not None and node.parent.type in WRAPPERS:
        node = node.parent
    row = node.start_point[0]
    prev = node.prev_named_sibling
    while prev is not None and prev.type in ("comment", "line_comment", "block_comment") \
            and prev.end_point[0] >= row - 1:
        row, prev = prev.start_point[0], prev.prev_named_sibling
    return int(row)


def definitions_in(root: Any) -> tuple[Definition, ...]:
    """The definitions under a tree's root node, in document order."""
    out: list[Definition] = []

    def visit(node: Any, depth: int, member: bool = False) -> list[int]:
        starts: list[int] = []
        for child in node.named_children:
            if len(out) >= MAX_DEFINITIONS:
                break
            kind = child.type
            if member and kind in VARIABLES:
                continue  # a class's fields: one line each, and their names are everywhere
            if kind in LEAVES or kind in CONTAINERS:
                name = name_of(child)
                at = len(out)
                if name is not None:  # before its members
                    out.append(Definition(name, _start(child), int(child.end_point[0])))
                    starts.append(out[at].start)
                inner = visit(child, depth + 1, True) if kind in CONTAINERS and depth < MAX_DEPTH else []
                if name is not None and inner:
                    out[at] = Definition(name, out[at].start, out[at].end, tuple(inner))
            elif kind in TRANSPARENT and depth < MAX_DEPTH:
                starts.extend(visit(child, depth + 1, member))
        return starts

    visit(root, 0)
    out.sort(key=lambda d: d.start)  # stable: a container stays before its members
    return tuple(out)


def extract_definitions(language_id: str, text: str) -> tuple[Definition, ...]:
    """Parse `text` (a file not open in the editor) and list its definitions; () without a
    grammar."""
    parser = parser_for(language_id)
    if parser is None:
        return ()
    tree = parser.parse(text.encode("utf-8", "surrogatepass"))
    return definitions_in(tree.root_node)


def definition_text(lines: list[str], d: Definition, max_lines: int = MAX_DEF_LINES) -> str:
    """The chunk of text that shows definition `d`: all of it when short; else, for a class
    with members, its head up to the first member and then each member's first line (a
    skeleton); else its first `max_lines` lines."""
    end = min(d.end, len(lines) - 1)
    span = lines[d.start: end + 1]
    if len(span) <= max_lines:
        return "\n".join(span).rstrip()
    if d.members:
        head_end = min(d.members[0], d.start + max_lines)
        kept = lines[d.start: head_end]
        for m in d.members:
            if len(kept) >= max_lines:
                break
            if head_end <= m <= end:
                kept.append(lines[m])
        return "\n".join(kept).rstrip()
    return "\n".join(span[:max_lines]).rstrip()
