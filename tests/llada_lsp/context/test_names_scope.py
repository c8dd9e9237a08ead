"""Names in scope (llada_lsp.context.names, name_hints): pure, on real tree-sitter grammars."""

from __future__ import annotations

from pathlib import Path

import pytest

from llada_lsp.context.name_hints import NameHints
from llada_lsp.context.workspace_index import WorkspaceIndex
from llada_lsp.text.documents import DocumentStore

PY = '''import os
import xml.etree.ElementTree as ET
from shop.pricing import apply_discount, apply_tax as tax
from . import helpers

RATE = 3
_cache = {}


def module_fn(alpha, beta=2, *rest, **opts):
    gamma = alpha + beta
    for idx, item in enumerate(rest):
        pass
    return 0


class Cart:
    limit = 10

    def __init__(self, items):
        self.items = items
        self.total_price = 0

    def add(self, item, qty=1):
        local_total = qty
        CURSOR
'''


def hint(text: str, marker: str, line: str, lang: str = "python", index: WorkspaceIndex | None = None,
         uri: str = "file:///w/t.py") -> tuple[str, tuple[str, ...]] | None:
    """Replace `marker` by `line` and ask for the names at the end of `line`."""
    src = text.replace(marker, line)
    off = src.index(line) + len(line)
    doc = DocumentStore().open(uri, lang, 1, src)
    got = NameHints(index or WorkspaceIndex()).hint(doc, off, doc.syntax_tree(), 0.9)
    return (got.typed, got.names) if got is not None else None


@pytest.mark.parametrize("line, typed, expect, absent", [
    ("x = loc", "loc", {"local_total", "locals"}, {"limit"}),  # a local and a builtin
    ("x = ite", "ite", {"item", "iter"}, {"items"}),  # a parameter; `items` is an attribute only
    ("x = ap", "ap", {"apply_discount"}, {"apply_tax"}),  # imported (apply_tax is imported as tax)
    ("x = ta", "ta", {"tax"}, set()),
    ("x = E", "E", {"ET", "Exception"}, set()),
    ("x = RA", "RA", {"RATE"}, set()),
    ("x = mod", "mod", {"module_fn"}, set()),
    ("x = Ca", "Ca", {"Cart"}, set()),
    ("x = gam", "gam", set(), {"gamma"}),  # another function's local: not in scope
    ("x = self.ite", "ite", {"items"}, {"item", "iter"}),  # after self.: members only
    ("x = self.to", "to", {"total_price"}, set()),
    ("x = self.ad", "ad", {"add"}, set()),
    ("x = self.li", "li", {"limit"}, set()),
    ("retu", None, None, None),  # a line's first word: maybe a new binding
    ("def loc", None, None, None),
    ("class Ca", None, None, None),
    ("x = 'loc", None, None, None),  # in a string
    ("x = foo.ite", None, None, None),  # an unknown receiver
])
def test_python_scopes(line: str, typed: str | None, expect: set[str] | None, absent: set[str] | None) -> None:
    got = hint(PY, "CURSOR", line)
    if typed is None:
        assert got is None
        return
    assert expect is not None and absent is not None
    if not expect:
        assert got is None or not (absent & set(got[1]))
        return
    assert got is not None and got[0] == typed
    assert expect <= set(got[1]), got
    assert not (absent & set(got[1])), got
    assert all(n.startswith(typed) for n in got[1])


def test_parameter_lists_and_left_of_assignment_are_definitions() -> None:
    src = PY.replace("CURSOR", "pass")
    for text, at in ((src.replace("def add(self, item, qty=1)", "def add(self, ite"), "def add(self, ite"),
                     (src.replace("        local_total = qty", "        local_t = qty"), "        local_t")):
        off = text.index(at) + len(at)
        doc = DocumentStore().open("file:///w/t.py", "python", 1, text)
        assert NameHints(WorkspaceIndex()).hint(doc, off, doc.syntax_tree(), 0.9) is None


def test_imported_module_members_and_index_names(tmp_path: Path) -> None:
    pkg = tmp_path / "shop"
    pkg.mkdir()
    (pkg / "pricing.py").write_text("def apply_discount(x):\n    return x\n\n\nclass PriceList:\n"
                                    "    def price_of(self):\n        return 1\n")
    (pkg / "util.py").write_text("def format_money(v):\n    return str(v)\n")
    index = WorkspaceIndex()
    index.set_roots([tmp_path.as_uri()])
    index.scan("python")
    src = "import shop.pricing as pricing\n\n\ndef f():\n    CURSOR\n"
    got = hint(src, "CURSOR", "x = pricing.Pri", index=index, uri=(tmp_path / "main.py").as_uri())
    assert got == ("Pri", ("PriceList",))
    got = hint(src, "CURSOR", "x = pricing.pri", index=index, uri=(tmp_path / "main.py").as_uri())
    assert got is None  # price_of is a member of PriceList, not of the module
    got = hint(src, "CURSOR", "x = format_", index=index, uri=(tmp_path / "main.py").as_uri())
    assert got is not None and "format_money" in got[1]  # the index's top-level names


JS = '''import { readFile } from "fs";
const LIMIT = 4;

function load(pathName, options) {
  const buffer = readFile(pathName);
  CURSOR
}

class Store {
  constructor(items) {
    this.items = items;
    this.count = 0;
  }
  size() {
    return this.cou
  }
}
'''


@pytest.mark.parametrize("lang", ["javascript", "typescript"])
def test_javascript_and_typescript_scopes(lang: str) -> None:
    got = hint(JS, "CURSOR", "return buf", lang, uri="file:///w/t.js")
    assert got is not None and "buffer" in got[1]
    got = hint(JS, "CURSOR", "let x = pat", lang, uri="file:///w/t.js")
    assert got is not None and "pathName" in got[1]
    got = hint(JS, "CURSOR", "let x = LI", lang, uri="file:///w/t.js")
    assert got is not None and "LIMIT" in got[1]
    got = hint(JS, "CURSOR", "let x = read", lang, uri="file:///w/t.js")
    assert got is not None and "readFile" in got[1]
    assert hint(JS, "CURSOR", "let buf", lang, uri="file:///w/t.js") is None
    src = JS.replace("CURSOR", "")
    off = src.index("return this.cou") + len("return this.cou")
    doc = DocumentStore().open("file:///w/t.js", lang, 1, src)
    got2 = NameHints(WorkspaceIndex()).hint(doc, off, doc.syntax_tree(), 0.9)
    assert got2 is not None and got2.names == ("count",)


def test_top_level_names_are_reused_while_typing_inside_a_function() -> None:
    hints = NameHints(WorkspaceIndex())
    store = DocumentStore()
    for k, line in enumerate(("x = l", "x = lo", "x = loc")):
        src = PY.replace("CURSOR", line)
        doc = store.open("file:///w/t.py", "python", k + 1, src)
        got = hints.hint(doc, src.index(line) + len(line), doc.syntax_tree(), 0.9)
        assert got is not None and "local_total" in got.names
    assert hints.scopes.misses == 1 and hints.scopes.hits == 2
    src = PY.replace("CURSOR", "x = loc").replace("RATE = 3", "RATE = 3\nRATIO = 4")  # an edit elsewhere
    doc = store.open("file:///w/t.py", "python", 9, src)
    got = hints.hint(doc, src.index("x = loc") + 7, doc.syntax_tree(), 0.9)
    assert hints.scopes.misses == 2  # recomputed: the file's top level changed
    src = src.replace("x = loc", "x = RATI")
    doc = store.open("file:///w/t.py", "python", 10, src)
    got = hints.hint(doc, src.index("x = RATI") + 8, doc.syntax_tree(), 0.9)
    assert got is not None and got.names == ("RATIO",)


def test_options_of_the_constraint() -> None:
    from llada_lsp.options import OptionsError, parse_options

    opts = parse_options({"namesConstraint": False, "namesKeepOwnAbove": 1})[0]
    assert opts.names_constraint is False and opts.names_keep_own_above == 1.0
    for bad in ({"namesKeepOwnAbove": 3}, {"namesKeepOwnAbove": "high"}, {"namesConstraint": "yes"}):
        with pytest.raises(OptionsError, match="names"):
            parse_options(bad)


def test_a_huge_files_top_level_names_are_read_at_its_start_and_around_the_cursor() -> None:
    """A file of 12,000 top-level statements (over `MAX_TOP_STATEMENTS`): the names bound by its
    imports and first statements are hinted, and those bound near the cursor (10,000
    statements in) too; those in between, far from both, are not; the cursor's own statement
    always counts. The same file with the cursor near its start hints the early names only."""
    from llada_lsp.context import names

    head = "import os.path as osp\n" + "".join(f"early_{i} = {i}\n" for i in range(100))
    mid = "".join(f"mid_{i} = {i}\n" for i in range(6000))
    late = "".join(f"late_{i} = {i}\n" for i in range(5000))
    tail = "".join(f"after_{i} = {i}\n" for i in range(900))
    src = head + mid + late + "def user(late_local):\n    CURSOR\n" + tail
    assert src.count("\n") > names.MAX_TOP_STATEMENTS + 6000
    for typed, seen in (("late_4999", True), ("late_3100", True), ("after_899", True), ("late_local", True),
                        ("early_99", True), ("osp", True), ("mid_3000", False), ("late_10", False)):
        got = hint(src, "CURSOR", f"x = {typed}")
        assert (typed in (got[1] if got is not None else ())) is seen, (typed, got)  # None: no name at all
    src = head + "def user(a):\n    CURSOR\n" + mid + late + tail
    for typed, seen in (("early_99", True), ("mid_900", True), ("late_4999", False)):
        got = hint(src, "CURSOR", f"x = {typed}")
        assert (typed in (got[1] if got is not None else ())) is seen, (typed, got)  # None: no name at all


def test_a_huge_javascript_files_names_are_read_at_its_start_and_around_the_cursor() -> None:
    from llada_lsp.context import names

    head = "".join(f"const early_{i} = {i};\n" for i in range(100))
    mid = "".join(f"const mid_{i} = {i};\n" for i in range(20_000))
    late = "".join(f"const late_{i} = {i};\n" for i in range(2000))
    src = head + mid + late + "function user(a) {\n  CURSOR\n}\n"
    assert len(src) > names.MAX_TOP_BYTES
    for typed, seen in (("late_1999", True), ("early_99", True), ("mid_10000", False)):
        got = hint(src, "CURSOR", f"x = {typed}", "javascript", uri="file:///w/t.js")
        assert (typed in (got[1] if got is not None else ())) is seen, (typed, got)  # None: no name at all


def test_a_languages_patterns_compile_as_one_query_skipping_those_its_grammar_lacks() -> None:
    """`compile_patterns` builds one query of every pattern; a pattern naming a node type the
    grammar lacks (another grammar version's) is left out and the others kept."""
    from llada_lsp.context.name_queries import SPECS, compile_patterns
    from llada_lsp.text.syntax import grammar

    lang, local = grammar("python"), SPECS["python"].local
    assert lang is not None
    whole = compile_patterns(lang, local)
    assert whole is not None and whole.pattern_count == len(local)
    broken = (*local[:3], "(no_such_node_type (identifier) @n)", *local[3:])
    kept = compile_patterns(lang, broken)
    assert kept is not None and kept.pattern_count == len(local)
    assert compile_patterns(lang, ("(no_such_node_type) @n",)) is None
    assert compile_patterns(lang, ()) is None


@pytest.mark.parametrize("lang", ["python", "javascript", "javascriptreact", "typescript", "typescriptreact"])
def test_each_languages_patterns_are_its_grammars_own(lang: str) -> None:
    """Every pattern of a served language compiles with the grammar wheel installed, so its
    queries compile as one (the per-pattern fallback is for other grammar versions: three
    times the work at the document's open)."""
    from llada_lsp.context.name_queries import SPECS, compiled

    comp, spec = compiled(lang), SPECS[lang]
    assert comp is not None
    for query, patterns in ((comp.top, spec.top), (comp.local, spec.local), (comp.members, spec.members)):
        assert query is not None and query.pattern_count == len(patterns)


@pytest.mark.parametrize("options, lang, warmed", [
    ({}, "python", True),
    ({"namesConstraint": False}, "python", False),  # the constraint off: nothing to build
    ({"languages": ["javascript"]}, "python", False),  # a language not completed
])
def test_opening_a_document_compiles_its_languages_name_queries(options: dict[str, object], lang: str,
                                                                warmed: bool) -> None:
    """The name queries (~45 ms for Python) are compiled when a document opens, not at its first
    keystroke: before, the first completion of a session spent ~145 ms in the server."""
    from llada_lsp.completion.completions import CompletionService
    from llada_lsp.context.name_queries import compiled
    from llada_lsp.options import parse_options
    from tests.fakes.scripted_engine import ScriptedEngine

    store = DocumentStore()
    parsed, _ = parse_options(options)
    svc = CompletionService(store, ScriptedEngine([]), parsed, lambda m, p: None, lambda: "utf-16")
    compiled.cache_clear()
    svc.document_opened(store.open("file:///w/a.src", lang, 1, "x = 1\n"))
    assert (compiled.cache_info().currsize == 1) is warmed
