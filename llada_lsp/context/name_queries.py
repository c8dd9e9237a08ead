"""Per-language facts for `llada_lsp.context.names`: the tree-sitter patterns that bind names, the
node types that open a scope, the words that introduce a new name, builtins and keywords.

Each pattern compiles on its own: one a grammar version does not know is skipped (logged),
the others still work. Languages served: Python, JavaScript, TypeScript (and their React
variants). Others get no names, so no constraint.
"""

from __future__ import annotations

import builtins
import keyword
import logging
from dataclasses import dataclass
from functools import cache

import tree_sitter as ts

from llada_lsp.text.syntax import grammar

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LanguageNames:
    root: str  # the tree's root node type
    top: tuple[str, ...]  # patterns (capture @n) of the names a file binds at its top level
    local: tuple[str, ...]  # patterns of the names a function binds (run over its range)
    members: tuple[str, ...]  # patterns of a class's members: @n, with @o the receiver when there is one
    receiver: str  # `self` / `this`
    functions: frozenset[str]  # node types whose range is a scope of locals
    classes: frozenset[str]
    parameters: frozenset[str]  # a cursor inside one of these writes a new name
    def_words: frozenset[str]  # a word after one of these is a new name
    skip: frozenset[str]  # node types at the cursor where no name is used (strings, comments)
    always: frozenset[str]  # builtins and keywords


_PY_LOCAL = (
    "(parameters (identifier) @n)", "(default_parameter name: (identifier) @n)",
    "(typed_parameter (identifier) @n)", "(typed_default_parameter name: (identifier) @n)",
    "(list_splat_pattern (identifier) @n)", "(dictionary_splat_pattern (identifier) @n)",
    "(lambda_parameters (identifier) @n)",
    "(assignment left: (identifier) @n)", "(assignment left: (pattern_list (identifier) @n))",
    "(assignment left: (tuple_pattern (identifier) @n))", "(augmented_assignment left: (identifier) @n)",
    "(for_statement left: (identifier) @n)", "(for_statement left: (pattern_list (identifier) @n))",
    "(for_in_clause left: (identifier) @n)", "(for_in_clause left: (pattern_list (identifier) @n))",
    "(as_pattern alias: (as_pattern_target (identifier) @n))", "(named_expression name: (identifier) @n)",
    "(function_definition name: (identifier) @n)", "(class_definition name: (identifier) @n)",
    "(import_from_statement name: (dotted_name . (identifier) @n .))",
    "(aliased_import alias: (identifier) @n)", "(import_statement name: (dotted_name . (identifier) @n))",
    "(global_statement (identifier) @n)", "(nonlocal_statement (identifier) @n)",
)
_PY_TOP = (
    "(module (function_definition name: (identifier) @n))",
    "(module (class_definition name: (identifier) @n))",
    "(module (decorated_definition definition: (function_definition name: (identifier) @n)))",
    "(module (decorated_definition definition: (class_definition name: (identifier) @n)))",
    "(module (expression_statement (assignment left: (identifier) @n)))",
    "(module (expression_statement (assignment left: (pattern_list (identifier) @n))))",
    "(module (if_statement (block (expression_statement (assignment left: (identifier) @n)))))",
    "(import_from_statement name: (dotted_name . (identifier) @n .))",
    "(aliased_import alias: (identifier) @n)", "(import_statement name: (dotted_name . (identifier) @n))",
)
_PY_MEMBERS = (
    "(assignment left: (attribute object: (identifier) @o attribute: (identifier) @n))",
    "(class_definition body: (block (function_definition name: (identifier) @n)))",
    "(class_definition body: (block (decorated_definition definition: (function_definition name: (identifier) @n))))",
    "(class_definition body: (block (expression_statement (assignment left: (identifier) @n))))",
)

# JavaScript's and TypeScript's grammars name a few nodes apart (a class's name, a parameter, a
# field): each language's queries hold only its own, so that they compile as one query
def _ecma(js: bool) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """(top, local, members) patterns of JavaScript (`js`) or TypeScript."""
    cls = "identifier" if js else "type_identifier"
    params = ("(formal_parameters (identifier) @n)",) if js else (
        "(required_parameter pattern: (identifier) @n)", "(optional_parameter pattern: (identifier) @n)")
    field = "(field_definition property: (property_identifier) @n)" if js else \
        "(public_field_definition name: (property_identifier) @n)"
    imports = ("(import_specifier name: (identifier) @n)", "(import_specifier alias: (identifier) @n)",
               "(import_clause (identifier) @n)", "(namespace_import (identifier) @n)")
    local = (
        "(variable_declarator name: (identifier) @n)", "(function_declaration name: (identifier) @n)",
        f"(class_declaration name: ({cls}) @n)", *params, "(assignment_pattern left: (identifier) @n)",
        "(shorthand_property_identifier_pattern) @n", "(array_pattern (identifier) @n)",
        "(arrow_function parameter: (identifier) @n)", "(catch_clause parameter: (identifier) @n)",
        *imports,
    )
    top = (
        "(program (lexical_declaration (variable_declarator name: (identifier) @n)))",
        "(program (variable_declaration (variable_declarator name: (identifier) @n)))",
        "(program (function_declaration name: (identifier) @n))",
        f"(program (class_declaration name: ({cls}) @n))",
        "(program (export_statement declaration: (lexical_declaration (variable_declarator name: (identifier) @n))))",
        "(program (export_statement declaration: (function_declaration name: (identifier) @n)))",
        f"(program (export_statement declaration: (class_declaration name: ({cls}) @n)))",
        *imports,
    )
    members = (
        "(assignment_expression left: (member_expression object: (this) @o property: (property_identifier) @n))",
        "(method_definition name: (property_identifier) @n)", field,
    )
    return top, local, members


_JS_TOP, _JS_LOCAL, _JS_MEMBERS = _ecma(js=True)
_TS_TOP, _TS_LOCAL, _TS_MEMBERS = _ecma(js=False)
_JS_WORDS = ("await break case catch class const continue debugger default delete do else export extends "
             "false finally for function if import in instanceof let new null return super switch this "
             "throw true try typeof undefined var void while with yield async of static get set "
             "Array Boolean Date Error JSON Map Math Number Object Promise Proxy Reflect RegExp Set "
             "String Symbol WeakMap WeakSet BigInt console document window globalThis parseInt "
             "parseFloat isNaN isFinite setTimeout clearTimeout setInterval clearInterval fetch "
             "require module exports process structuredClone queueMicrotask encodeURIComponent "
             "decodeURIComponent TypeError RangeError SyntaxError Infinity NaN")
_TS_WORDS = " interface type enum implements private protected public readonly declare namespace keyof " \
            "abstract as is any unknown never string number boolean object Record Partial Readonly"

_PY = LanguageNames(
    "module", _PY_TOP, _PY_LOCAL, _PY_MEMBERS, "self",
    frozenset({"function_definition", "lambda"}), frozenset({"class_definition"}),
    frozenset({"parameters", "lambda_parameters"}),
    frozenset({"def", "class", "import", "from", "as", "global", "nonlocal", "for"}),
    frozenset({"string", "string_content", "comment", "concatenated_string"}),
    frozenset(n for n in (*dir(builtins), *keyword.kwlist, *keyword.softkwlist) if n.isidentifier()),
)
_JS = LanguageNames(
    "program", _JS_TOP, _JS_LOCAL, _JS_MEMBERS, "this",
    frozenset({"function_declaration", "function_expression", "arrow_function", "method_definition",
               "generator_function_declaration", "function"}),
    frozenset({"class_declaration", "class"}),
    frozenset({"formal_parameters"}),
    frozenset({"function", "class", "let", "const", "var", "import", "as", "interface", "type", "enum"}),
    frozenset({"string", "string_fragment", "template_string", "comment", "regex"}),
    frozenset(_JS_WORDS.split()),
)
_TS = LanguageNames(_JS.root, _TS_TOP, _TS_LOCAL, _TS_MEMBERS, _JS.receiver, _JS.functions,
                    _JS.classes | {"abstract_class_declaration"}, _JS.parameters, _JS.def_words, _JS.skip,
                    frozenset((_JS_WORDS + _TS_WORDS).split()))

SPECS: dict[str, LanguageNames] = {"python": _PY, "javascript": _JS, "javascriptreact": _JS,
                                   "typescript": _TS, "typescriptreact": _TS}


@dataclass(frozen=True)
class Compiled:
    spec: LanguageNames
    top: ts.Query | None
    local: ts.Query | None
    members: ts.Query | None


def compile_patterns(lang: ts.Language, patterns: tuple[str, ...]) -> ts.Query | None:
    """The patterns as one query. Compiled whole first (one pass: ~15 ms for Python's
    larger sets); only when that fails is each pattern tried alone, to skip the ones naming a
    node type this grammar version lacks (three times the work)."""
    if not patterns:
        return None
    try:
        return ts.Query(lang, "\n".join(patterns))
    except (ts.QueryError, ValueError, NameError) as e:
        log.debug("names: a pattern does not compile (%s); trying each alone", e)
    ok = []
    for p in patterns:
        try:
            ts.Query(lang, p)
        except (ts.QueryError, ValueError, NameError) as e:  # a node type this grammar version lacks
            log.debug("names: pattern skipped (%s): %s", e, p)
            continue
        ok.append(p)
    return ts.Query(lang, "\n".join(ok)) if ok else None


@cache
def compiled(language_id: str) -> Compiled | None:
    """The queries of a language, or None (not served, or no grammar). Compiled once a
    process (~45 ms for Python), when a document of the language opens (`NameHints.warm`),
    not at its first keystroke."""
    spec, lang = SPECS.get(language_id), grammar(language_id)
    if spec is None or lang is None:
        return None
    return Compiled(spec, compile_patterns(lang, spec.top), compile_patterns(lang, spec.local), compile_patterns(lang, spec.members))
