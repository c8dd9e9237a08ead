"""The grammar facts and tree helpers the edit analysis reads (`llada_lsp.nextedit.edit_analysis`,
`llada_lsp.nextedit.edit_params`): per language the node types of identifiers, scopes, parameter lists
and calls; a text with its UTF-8 bytes (and the request's `Guard`); a follow-up `Site`. Every
scan for a name goes through `word_nodes`, which holds the request's limits
(`llada_lsp.nextedit.edit_limits`)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import tree_sitter as ts

from llada_lsp.nextedit.edit_limits import Guard, check_depth, word_spans

WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
TOKENS = re.compile(r"[A-Za-z_0-9]+|\s+|.", re.S)
JS_WORD = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*")  # JS/TS names may hold `$` (`completions$`)
JS_TOKENS = re.compile(r"[A-Za-z_0-9$]+|\s+|.", re.S)


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
                     "function", "generator_function_declaration", "function_signature", "method_signature",
                     "abstract_method_signature"}),
          frozenset({"function_declaration", "function_expression", "arrow_function", "method_definition",
                     "function", "generator_function_declaration", "function_signature", "method_signature",
                     "abstract_method_signature", "statement_block", "class_body", "for_statement",
                     "for_in_statement", "catch_clause"}),
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


@dataclass
class Text:
    """A text with its UTF-8 bytes and the offset maps between them (identity for ASCII), and
    the guard of the request analysing it."""

    text: str
    guard: Guard | None = None
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


def is_field(n: ts.Node, name: str) -> bool:
    p = n.parent
    return p is not None and p.child_by_field_name(name) == n


def ancestor(n: ts.Node, types: frozenset[str]) -> ts.Node | None:
    p = n.parent
    while p is not None and p.type not in types:
        p = p.parent
    return p


def root_of(n: ts.Node) -> ts.Node:
    while n.parent is not None:
        n = n.parent
    return n


def inside(n: ts.Node, outer: ts.Node | None) -> bool:
    return outer is not None and outer.start_byte <= n.start_byte and n.end_byte <= outer.end_byte


def word_nodes(t: Text, scope: ts.Node, name: str) -> list[ts.Node]:
    """The smallest nodes spanning each whole-word match of `name` inside `scope`. Refused when
    the name occurs more than `MAX_SITES` times there or a match lies deeper than `MAX_DEPTH`
    below it; Cancelled when the request is."""
    out: list[ts.Node] = []
    for i, j in word_spans(t.data, name, scope.start_byte, scope.end_byte):
        if t.guard is not None:
            t.guard.check()
        check_depth(scope, i)
        n = scope.descendant_for_byte_range(i, j)
        if n is not None and n.start_byte == i and n.end_byte == j:
            out.append(n)
    return out
