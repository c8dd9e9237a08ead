"""Unit tests of the pure helpers: refine edits, options, plans, context, post-processing, cache
(the text group's own: tests/llada_lsp/text/)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from engine.api import Plan
from engine.decoding.stops import cut_text
from llada_lsp.completion.cache import SuggestionCache, key_of, remember, type_through
from llada_lsp.completion.context import trim_context
from llada_lsp.completion.plans import choose_kind, indent_unit, make_plan
from llada_lsp.completion.postprocess import Spec, clean, first_fitting, open_brackets, syntax_trim
from llada_lsp.completion.reporting import edits_between
from llada_lsp.options import OptionsError, parse_options
from llada_lsp.text.documents import Document
from llada_lsp.text.positions import text_position
from llada_lsp.text.syntax import adds_error

DATA = Path(__file__).resolve().parents[1] / "data"
ROOT = Path(__file__).resolve().parents[3]


# -- refine edits ----------------------------------------------------------------------------
def test_text_position_and_refine_edits() -> None:
    assert text_position("ab\ncd", 4, "utf-16") == (1, 1)
    edits = edits_between("x = 1\ny = 2", "x = 1\ny = 3", "utf-16")
    assert edits == [{"range": {"start": {"line": 1, "character": 4},
                                "end": {"line": 1, "character": 5}}, "newText": "3"}]
    assert edits_between("same", "same", "utf-16") == []


# -- options -------------------------------------------------------------------------------
def test_options_camel_case_nested_and_errors() -> None:
    opts, warnings = parse_options({"mode": "quality", "maxTokens": {"line": 10},
                                    "debounceMs": 30, "bogus": 1})
    assert opts.mode == "quality" and opts.max_tokens.line == 10 and opts.debounce_ms == 30
    assert opts.max_tokens.block == 160  # untouched default
    assert warnings == ["unknown option 'bogus' ignored"]
    merged, _ = parse_options({"llada": {"languages": ["python"]}}, base=opts)
    assert merged.mode == "quality" and merged.languages == ["python"]
    assert opts.languages == ["*"]  # the base is not mutated
    with pytest.raises(OptionsError, match="mode"):
        parse_options({"mode": "fast"})
    with pytest.raises(OptionsError, match="debounceMs"):
        parse_options({"debounceMs": "x"})
    with pytest.raises(OptionsError, match="engine"):
        parse_options({"engine": "http://x"})
    clamped, warnings = parse_options({"alternatives": 9})  # out of range: clamped (issue 41)
    assert clamped.alternatives == 8 and "alternatives" in warnings[0]


# -- plans -----------------------------------------------------------------------------------
def _kind(text: str, needle: str, lid: str, *, end: bool = True) -> str:
    i = text.index(needle) + (len(needle) if end else 0)
    doc = Document("file:///x", lid, 1, text, 10**6)
    return choose_kind(text, i, lid, doc.syntax_tree())[0]


def test_plan_kinds_python() -> None:
    src = (DATA / "shapes.py.txt").read_text()
    assert _kind(src, "def scale(points: list[Point], factor: float) -> list[Point]:",
                 "python") == "block"
    i = src.index("    \n    return Point(0.0") + 4
    doc = Document("file:///x", "python", 1, src, 10**6)
    assert choose_kind(src, i, "python", doc.syntax_tree())[0] == "statements"
    assert _kind(src, "total = 0.0", "python") == "line"
    assert _kind(src, "perimeter(squ", "python") == "none"  # inside an identifier
    assert _kind(src, 'f"perimeter of ', "python") == "none"  # inside a string
    assert _kind("x = 1  # note that", "# note ", "python") == "line"  # inside a comment


@pytest.mark.parametrize(("src", "after", "kind"), [
    ('def f(x):\n    """Double x."""\n    \n\n\ndef g():\n    pass\n', '"""Double x."""\n    ', "block"),
    ('def f(x):\n    """Double x.\n\n    More.\n    """\n    \n\nx = 1\n', '    """\n    ', "block"),
    ("def f(x):\n    # todo\n    # later\n    \n", "# later\n    ", "block"),
    # a body with statements after the docstring: statements; a module docstring: no header
    ('def f(x):\n    """Doc."""\n    \n    return x\n', '"""Doc."""\n    ', "statements"),
    ('"""Module."""\n\n\nimport os\n', '"""Module."""\n', "statements"),
    # a string that merely ends a statement is not a docstring
    ('def f():\n    x = """a\n    b"""\n    \n', 'b"""\n    ', "statements"),
], ids=["docstring", "multiline-docstring", "comment", "busy-body", "module-docstring", "assigned-string"])
def test_plan_kind_looks_past_a_docstring_or_comment_that_opens_the_body(src: str, after: str, kind: str) -> None:
    """A function whose body is only its docstring (or a comment) is still an empty body:
    ask for a block that ends at the dedent, not for statements that end at a blank line."""
    assert _kind(src, after, "python") == kind


def test_plan_kinds_braces() -> None:
    assert _kind((DATA / "queue.ts").read_text(), "size(): number {\n    ", "typescript") \
        == "block"
    assert _kind((DATA / "stack.go").read_text(), "Len() int {\n\t", "go") == "block"
    assert _kind((DATA / "matrix.rs").read_text(), "-> Matrix {\n        ", "rust") == "block"
    assert _kind("function f() {}", "{", "javascript") == "block"  # autopaired closer
    assert _kind("local function f()\n  \nend\n", "f()\n  ", "lua") == "block"


def test_plan_maps_onto_engine_plan() -> None:
    from llada_lsp.options import Options

    src = (DATA / "queue.ts").read_text()
    i = src.index("size(): number {\n    ") + len("size(): number {\n    ")
    p = make_plan(src, i, "typescript", Options())
    assert p.kind == "block" and p.engine_plan is not None
    assert p.engine_plan.stop == "brace" and not p.engine_plan.keep_closer  # the suffix has the "}"
    assert p.engine_plan.max_tokens == Options().max_tokens.block and p.engine_plan.preset == "speedy"
    # the candidate count is decided once, here, and sent explicit: the mode's default...
    assert p.engine_plan.alternatives == p.candidates == 1
    quality = make_plan(src, i, "typescript", Options(mode="quality"))
    assert quality.engine_plan is not None and quality.engine_plan.alternatives == quality.candidates == 4
    two = make_plan(src, i, "typescript", Options(mode="quality", alternatives=2))  # ...or the option
    assert two.engine_plan is not None and two.engine_plan.alternatives == two.candidates == 2
    j = src.index("const task = this.tasks.shift();") + len("const task = this.tasks.shift();")
    q = make_plan(src, j, "typescript", Options())
    assert q.kind == "line" and q.engine_plan is not None and q.engine_plan.stop == "line"


def test_indent_unit() -> None:
    assert indent_unit("def f():\n  x = 1\n  if x:\n    y\n") == "  "
    assert indent_unit((DATA / "stack.go").read_text()) == "\t"


# -- context trimming --------------------------------------------------------------------------
def test_context_keeps_imports_and_headers_and_is_stable() -> None:
    body = "".join(f"    v{i} = compute({i})\n" for i in range(400))
    text = "import os\nimport sys\n\n\nclass Big:\n    def run(self):\n" + body.replace(
        "    ", "        ")
    doc = Document("file:///b.py", "python", 1, text, 10**6)
    off = len(text) - 10
    ctx = trim_context(text, off, tree=doc.syntax_tree(), prefix_chars=2000, suffix_chars=100)
    assert len(ctx.prefix) <= 2000
    assert ctx.prefix.startswith("import os\nimport sys\n")
    assert "class Big:\n" in ctx.kept and "    def run(self):\n" in ctx.kept
    window = ctx.prefix[len(ctx.kept):]
    assert window.startswith("        v")  # a whole statement
    # typing one more character keeps the window's start
    text2 = text[:off] + "x" + text[off:]
    doc2 = Document("file:///b.py", "python", 1, text2, 10**6)
    ctx2 = trim_context(text2, off + 1, tree=doc2.syntax_tree(), prefix_chars=2000,
                        suffix_chars=100)
    assert ctx2.window_start == ctx.window_start
    # without a tree (unknown language) the indentation rules do the same job
    ctx3 = trim_context(text, off, prefix_chars=2000, suffix_chars=100)
    assert ctx3.prefix.startswith("import os\n") and "class Big:\n" in ctx3.kept


def test_context_small_file_untouched() -> None:
    ctx = trim_context("a = 1\nb = ", 10)
    assert ctx.prefix == "a = 1\nb = " and ctx.suffix == "" and ctx.kept == ""


# -- post-processing ---------------------------------------------------------------------------
def _spec(**kw: object) -> Spec:
    base: dict[str, object] = {"kind": "line", "left": "    x = ", "suffix": "\n"}
    base.update(kw)
    return Spec(**base)  # type: ignore[arg-type]


def test_clean_line_stop_and_whitespace() -> None:
    assert clean(cut_text("foo(1)\nbar()", Plan(stop="line"))[0], _spec())[0] == "foo(1)"  # the engine cut it
    assert clean("   \n  ", _spec())[0] == ""
    assert clean("", _spec())[0] == ""


def test_clean_applies_no_stop_rule_the_engine_applied_it() -> None:
    """The stop rule has one place, the engine (`engine.decoding.stops`): `clean` keeps lines
    past a blank line or a dedent as the engine sent them (the engine never sends them)."""
    spec = _spec(kind="statements", left="    ", suffix="\n    return x\n")
    past = "a = 1\n    b = 2\n\n    c = 3"
    assert clean(past, spec)[0] == past
    assert clean("a = 1\nprint(a)", spec)[0] == "a = 1\nprint(a)"
    plan = Plan(stop="blank_line", indent="    ", max_lines=8)  # what make_plan asks for there
    assert cut_text(past, plan)[0] == "a = 1\n    b = 2"
    assert cut_text("a = 1\nprint(a)", plan)[0] == "a = 1"  # dedented: the body ended
    spec_b = _spec(kind="block", left="", suffix="\n\nx = 1\n")
    block = cut_text("\n    return 1\ndef g():\n    pass", Plan(stop="dedent", indent="    "))[0]
    assert clean(block, spec_b)[0] == "\n    return 1"


def test_clean_cuts_lines_a_return_makes_unreachable() -> None:
    spec = _spec(kind="block", left="    ", suffix="\n\n\ndef g():\n")
    # the demo's body: the first line sits after the cursor's indentation
    assert clean("return x + y\n    return x + y\n    return x + y", spec)[0] == "return x + y"
    assert clean("x = f()\n    raise ValueError(x)\n    y = 2", spec)[0] == "x = f()\n    raise ValueError(x)"
    # reachable: what follows a return nested deeper, and a return still open over lines
    nested = "if a:\n        return 1\n    return 2"
    assert clean(nested, spec)[0] == nested
    open_return = "return (\n        a,\n        b)"
    assert clean(open_return, spec)[0] == open_return
    js = _spec(kind="block", left="  ", suffix="\n}\n")
    assert clean("if (a) {\n    break;\n  }\n  throw e;\n  b();", js)[0] == "if (a) {\n    break;\n  }\n  throw e;"


def test_clean_drops_repeats() -> None:
    spec = _spec(kind="line", left="    ", line_above="    total = 0", suffix="\n    return 1\n")
    assert clean("total = 0", spec) == ("", "repeats the line above")
    assert clean("return 1", spec) == ("", "repeats the next line")
    spec2 = _spec(kind="line", left="f(", suffix="a, b)\n")
    assert clean("a, b)", spec2)[0] == ""


def test_clean_brackets() -> None:
    # the suffix already closes the call: do not close it again
    assert clean("a, b)", _spec(left="f(", suffix=")\n", prefix_open="("))[0] == "a, b"
    # the prefix opened it and nothing closes it: closing is allowed
    assert clean("a, b)", _spec(left="f(", suffix="\n", prefix_open="("))[0] == "a, b)"
    # a closer nobody opened ends the suggestion
    assert clean("1]", _spec(left="x = ", suffix="\n"))[0] == "1"
    # a brace block: the closing line is kept only when the suffix lacks it
    spec = _spec(kind="block", left="", brace=True, keep_closer=False,
                 suffix="\n}\n")
    assert clean("return 1;\n}\nfunction g() {", spec)[0] == "return 1;"
    spec_keep = _spec(kind="block", left="", brace=True, keep_closer=True,
                      suffix="\n")
    assert clean("return 1;\n}\nfunction g() {", spec_keep)[0] == "return 1;\n}"
    # brackets it opens and closes itself are fine
    assert clean("g(h(1), [2])", _spec())[0] == "g(h(1), [2])"
    assert open_brackets("f(a, [b") == "(["


def test_clean_closing_line_the_suffix_has_and_repetition() -> None:
    spec = _spec(kind="block", left="", suffix="\nend\n")
    assert clean("return 1\nend", spec)[0] == "return 1"
    assert clean("x = 1" + ")" * 20, _spec(suffix="\n"))[0] == "x = 1"
    rep = "a = 1\nb = 2\nb = 2\nb = 2\nb = 2"
    spec_s = _spec(kind="statements", left="", suffix="\n")
    assert clean(rep, spec_s)[0] == "a = 1\nb = 2\nb = 2"
    assert clean("xyxyxyxyxyxyxyxyxyxy", _spec())[0] == "xy"


def test_syntax_trim() -> None:
    before, after = "def f(x):\n    ", "\n"

    def check(s: str) -> bool:
        return adds_error("python", None, before, s, after)

    assert syntax_trim("y = x\n    return y", check) == ("y = x\n    return y", "")
    assert syntax_trim("y = x\n    return (y +", check) == ("y = x", "trimmed to parse")
    assert syntax_trim("return (y +", check)[0] == ""


def test_syntax_trim_drops_a_stray_closing_line() -> None:
    """The model echoes the docstring's closing quotes on the line below them: the stray line
    goes, the body after it stays (and only when that parses)."""
    before, after = 'def f(x):\n    """Double x."""\n    ', "\n\n\ndef g():\n    pass\n"

    def check(s: str) -> bool:
        return adds_error("python", None, before, s, after)

    assert syntax_trim('"""\n    return x * 2', check) == ("return x * 2", "dropped a stray closing line")
    assert syntax_trim('"""\n    return (x *', check) == ("", "adds a parse error")
    assert syntax_trim('x = """\n    return x', check)[0] != "return x"  # not a bare closer


def test_clean_drops_an_echo_of_the_line_above_ending() -> None:
    """At a fresh line under a docstring, a first line that only repeats its closing quotes
    (the model echoing them) goes, and what follows it is the suggestion."""
    spec = _spec(kind="block", left="    ", line_above='    """Double x."""',
                 suffix="\n\n\ndef g():\n    pass\n")
    assert clean('"""\n    return x * 2', spec)[0] == "return x * 2"
    assert clean('"""\n\n    y = x\n    return y', spec)[0] == "y = x\n    return y"
    assert clean('"""', spec)[0] == '"""'  # nothing after it: left to the syntax check
    other = _spec(kind="block", left="    ", line_above="    x = f(a)",
                  suffix="\n")
    assert clean('"""\n    return x', other)[0] == '"""\n    return x'  # not an echo
    line = _spec(kind="line", left="    ", line_above='    """Doc."""', suffix="\n")
    assert clean('"""', line)[0] == '"""'  # single-line kind: untouched


# -- cache and type-through ---------------------------------------------------------------------
def test_lru_cache() -> None:
    c = SuggestionCache(2)
    k1, k2, k3 = key_of("a", "b", "line"), key_of("a", "c", "line"), key_of("ab", "", "line")
    assert len({k1, k2, k3}) == 3
    c.put(k1, "1")
    c.put(k2, "2")
    assert c.get(k1) == "1"
    c.put(k3, "3")  # evicts k2, the least recently used
    assert c.get(k2) is None and c.get(k3) == "3" and c.hits == 2


def test_cache_keeps_candidates_with_the_text() -> None:
    c = SuggestionCache(2)
    k1, k2, k3 = (key_of(p, "", "line") for p in ("a", "b", "c"))
    c.put(k1, "x", ("y", "z"), decoded=4)
    assert (c.others(k1), c.decoded(k1)) == (("y", "z"), 4)
    c.put(k1, "x")  # a later put without candidates replaces them
    assert (c.others(k1), c.decoded(k1)) == ((), 1)
    assert (c.others(k2), c.decoded(k2)) == ((), 0)  # not cached
    c.put(k1, "x", ("y",), decoded=2)
    c.put(k2, "u")
    c.put(k3, "v")  # evicts k1 and its candidates
    assert c.get(k1) is None and (c.others(k1), c.decoded(k1)) == ((), 0)


def test_type_through() -> None:
    doc = "def f(x):\n    re\n\nprint(1)\n"
    anchor = doc.index("re") + 2
    shown = remember("1", doc, anchor, "turn x + 1", "line")
    typed = doc[:anchor] + "tu" + doc[anchor:]
    assert type_through(shown, typed, anchor + 2) == "rn x + 1"
    wrong = doc[:anchor] + "tx" + doc[anchor:]
    assert type_through(shown, wrong, anchor + 2) is None
    edited_elsewhere = "#" + typed
    assert type_through(shown, edited_elsewhere, anchor + 3) is None
    assert type_through(shown, doc, anchor) is None  # nothing typed: not type-through


def test_type_through_a_version_the_editor_still_shows() -> None:
    """A refinement crossed the user's keystrokes: the typed characters match the version the
    editor drew, not the refined one; the rest of that version is served."""
    doc = "def f(x):\n    re\n\nprint(1)\n"
    anchor = doc.index("re") + 2
    shown = remember("1", doc, anchor, "turn x + 1", "line")
    shown.refine("sult = x")
    shown.refine("sult = x * 2")
    typed = doc[:anchor] + "tur" + doc[anchor:]
    assert type_through(shown, typed, anchor + 3) == "n x + 1"  # the draft the editor showed
    typed = doc[:anchor] + "sult" + doc[anchor:]
    assert type_through(shown, typed, anchor + 4) == " = x * 2"  # the newest version wins
    # the refined text accepted whole: done, not the tail of the longer first draft
    shown.refine("turn x")
    assert type_through(shown, doc[:anchor] + "turn x" + doc[anchor:], anchor + 6) is None
    for i in range(5):
        shown.refine(f"v{i}")
    assert len(shown.earlier) == 4 and type_through(shown, doc[:anchor] + "tu" + doc[anchor:], anchor + 2) is None


# -- packaging -----------------------------------------------------------------------------------
def test_import_does_not_load_torch() -> None:
    code = ("import sys, llada_lsp.lsp.methods, llada_lsp.cli, llada_lsp.demo; "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, check=True)
    assert out.stdout.strip() == "False"


def test_first_fitting_prefers_the_first_candidate_without_a_new_error() -> None:
    def bad(t: str) -> bool:
        return "(" in t and ")" not in t

    assert first_fitting(["f(x", "g(x)", "h(x)"], bad) == 1
    assert first_fitting(["f(x)", "g(x)"], bad) == 0
    assert first_fitting(["", "  ", "f(x", "g(y"], bad) == 2  # none fits: the first non-empty
    assert first_fitting(["", "f(x"], None) == 1  # no check: the first non-empty
    assert first_fitting(["", ""], bad) == 0
