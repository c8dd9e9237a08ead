"""Edit analysis, second round (issue 42): fields added to records -> their constructors,
Python keyword arguments at calls, method calls in JS/TS, Go and Rust. Real tree-sitter
grammars; every site, filled with its placeholder, must pass `edit_window.keep` (no parse
error added)."""

from __future__ import annotations

import pytest

from llada_lsp.nextedit.edit_analysis import Analysis, analyze
from llada_lsp.nextedit.edit_window import from_analysis, from_placeholder, keep
from llada_lsp.text.positions import LineIndex
from llada_lsp.text.syntax import count_errors, parser_for


def run(lang: str, old: str, new: str) -> Analysis:
    p = parser_for(lang)
    assert p is not None
    a = analyze(lang, old, new, p.parse(old.encode()), p.parse(new.encode()))
    tree = p.parse(new.encode())
    found = [s for x in a.sites if (s := from_analysis(x) or from_placeholder(x)) is not None]
    kept = keep(lang, new, LineIndex.of(new), found, (10_000, 10_000), count_errors(tree.root_node), tree)
    assert len(kept) == len(a.sites), (found, kept)  # each one changes something and parses
    return a


def applied(text: str, a: Analysis) -> str:
    for s in sorted(a.sites, key=lambda s: -s.start):
        body = s.prior if s.prior is not None else s.hint
        text = text[:s.start] + s.before + body + s.after + text[s.end:]
    return text


DC = '''from dataclasses import dataclass
from typing import ClassVar, NamedTuple


@dataclass
class P:
    x: int
    y: int
    count: ClassVar[int] = 0


p = P(1, 2)
q = P(1, y=2)
r = P(x=1, y=2)
s = P(1, 2, 3)  # not P's old shape: left alone
label = "P(1, 2)"  # P(1, 2)
'''


def test_python_dataclass_field_added_positional_or_keyword() -> None:
    new = DC.replace("    x: int\n", "    x: int\n    größe: str\n")
    a = run("python", DC, new)
    assert a.kind == "field_added" and a.detail == "P: +größe at 1"
    assert [s.hint for s in a.sites] == ["größe"] * 3
    assert applied(new, a).split("\n\n\n")[-1] == (
        'p = P(1, größe, 2)\nq = P(1, y=2, größe=größe)\nr = P(x=1, y=2, größe=größe)\n'
        's = P(1, 2, 3)  # not P\'s old shape: left alone\nlabel = "P(1, 2)"  # P(1, 2)\n')
    # appended at the class's end: positional after the last one
    new = DC.replace("    y: int\n", "    y: int\n    z: float\n")
    assert applied(new, run("python", DC, new)).split("\n\n\n")[-1].startswith("p = P(1, 2, z)\nq = P(1, y=2, z=z)\n")


def test_python_field_with_a_default_classvar_or_plain_class_needs_nothing() -> None:
    a = run("python", DC, DC.replace("    y: int\n", "    y: int\n    z: float = 0.0\n"))
    assert a.kind == "field_added" and a.sites == () and "default" in a.detail
    assert run("python", DC, DC.replace("    y: int\n", "    y: int\n    k: ClassVar[str] = ''\n")).kind == "none"
    plain = DC.replace("@dataclass\n", "")
    assert run("python", plain, plain.replace("    y: int\n", "    y: int\n    z: float\n")).kind == "none"


def test_python_namedtuple_and_kw_only_dataclass() -> None:
    nt = "from typing import NamedTuple\n\n\nclass Pt(NamedTuple):\n    a: int\n\n\nv = Pt(1)\nw = Pt(a=2)\n"
    new = nt.replace("    a: int\n", "    a: int\n    b: int\n")
    assert applied(new, run("python", nt, new)).endswith("v = Pt(1, b)\nw = Pt(a=2, b=b)\n")
    kw = DC.replace("@dataclass\n", "@dataclass(kw_only=True)\n")
    new = kw.replace("    x: int\n", "    x: int\n    w: str\n")
    assert "p = P(1, 2, w=w)\n" in applied(new, run("python", kw, new))


GO = '''package m

type T struct {
	A int
	B string
}

func f() []T {
	t := T{A: 1, B: "x"}
	u := T{
		A: 1,
		B: "y",
	}
	v := T{1, "z"}
	w := T{}
	x := T{B: "partial"}
	return []T{t, u, v, w, x, {A: 2}}
}
'''


def test_go_struct_field_added_to_keyed_literals_only() -> None:
    new = GO.replace("\tA int\n", "\tA int\n\tC float64\n")
    a = run("go", GO, new)
    assert a.kind == "field_added" and len(a.sites) == 2
    got = applied(new, a)
    assert '\tt := T{A: 1, C: C, B: "x"}\n\tu := T{\n\t\tA: 1,\n\t\tC: C,\n\t\tB: "y",\n\t}\n' in got
    assert '\tv := T{1, "z"}\n\tw := T{}\n\tx := T{B: "partial"}\n' in got  # unkeyed, empty, partial: zero-filled
    first = GO.replace("\tA int\n", "\tZ bool\n\tA int\n")
    assert 'T{Z: Z, A: 1, B: "x"}' in applied(first, run("go", GO, first))


RS = '''struct P { a: i32, b: i32 }

impl P {
    fn new() -> Self { Self { a: 1, b: 2 } }
}

fn f(b: i32, d: P) -> Vec<P> {
    let p = P { a: 1, b };
    let q = P {
        b: 2,
        a: 1
    };
    vec![p, q, P { a: 1, ..d }]
}
'''


def test_rust_struct_field_added_to_struct_expressions() -> None:
    new = RS.replace("struct P { a: i32, b: i32 }", "struct P { a: i32, c: u8, b: i32 }")
    a = run("rust", RS, new)
    assert a.kind == "field_added" and len(a.sites) == 3  # Self { .. }, P { a, b }, the multi-line one
    got = applied(new, a)
    assert "Self { a: 1, c: c, b: 2 }" in got and "P { a: 1, c: c, b }" in got
    assert "        b: 2,\n        a: 1,\n        c: c\n    };" in got
    assert "P { a: 1, ..d }" in got  # `..d` gives the rest


def test_python_keyword_arguments_removed_reordered_added() -> None:
    py = "def f(a, b, c=0):\n    return a\n\n\nf(1, 2)\nf(1, b=2)\nf(1, 2, c=3)\nf(a=1, c=3, b=2)\nf(*xs)\n"
    new = py.replace("def f(a, b, c=0)", "def f(a, c=0)")
    assert applied(new, run("python", py, new)).endswith("f(1)\nf(1)\nf(1, c=3)\nf(a=1, c=3)\nf(*xs)\n")
    new = py.replace("def f(a, b, c=0)", "def f(b, a, c=0)")
    assert applied(new, run("python", py, new)).endswith("f(2, 1)\nf(1, b=2)\nf(2, 1, c=3)\nf(a=1, c=3, b=2)\nf(*xs)\n")
    new = py.replace("def f(a, b, c=0)", "def f(a, b, d, c=0)")
    assert applied(new, run("python", py, new)).endswith(
        "f(1, 2, d)\nf(1, b=2, d=d)\nf(1, 2, c=3, d=d)\nf(a=1, c=3, b=2, d=d)\nf(*xs)\n")
    new = py.replace("def f(a, b, c=0)", "def f(a, b, c=0, *, e)")
    assert "f(1, 2, e=e)\n" in applied(new, run("python", py, new))
    a = run("python", py, py.replace("def f(a, b, c=0)", "def f(a, b, c=0, e=None)"))
    assert a.kind == "param_added" and a.sites == ()  # a default: the calls need nothing


JS = '''class Box {
  scale(v, k) { return v * k; }
  run() { return this.scale(1, 2); }
}
const b = new Box();
b.scale(3, 4);
arr.push(5, 6);
'''


@pytest.mark.parametrize("lang", ["javascript", "typescript"])
def test_js_method_calls_follow_a_unique_method(lang: str) -> None:
    new = JS.replace("scale(v, k) {", "scale(k, v) {")
    got = applied(new, run(lang, JS, new))
    assert "return this.scale(2, 1);" in got and "b.scale(4, 3);" in got and "arr.push(5, 6)" in got
    # two classes define scale: an unknown receiver is not followed, `this.` still is
    two = JS + "class Img {\n  scale(f) { return f; }\n}\nimg.scale(2);\n"
    new = two.replace("scale(v, k) {", "scale(k, v) {")
    got = applied(new, run(lang, two, new))
    assert "return this.scale(2, 1);" in got and "b.scale(3, 4);" in got and "img.scale(2)" in got


def test_go_method_calls() -> None:
    go = ("package m\n\ntype S struct{}\n\nfunc (s *S) Add(a int, b int) int { return a + b }\n\n"
          "func use(s *S) int { return s.Add(1, 2) + Add(3, 4) }\n")
    new = go.replace("Add(a int, b int)", "Add(a int)")
    assert applied(new, run("go", go, new)).endswith("return s.Add(1) + Add(3, 4) }\n")
    new = go.replace("Add(a int, b int)", "Add(a int, b int, c int)")
    assert applied(new, run("go", go, new)).endswith("return s.Add(1, 2, c) + Add(3, 4) }\n")
    recv = go.replace("func (s *S) Add", "func (t *S) Add")  # the receiver changed: no parameter edit
    assert run("go", go, recv).kind != "param_removed"


def test_rust_method_and_associated_calls() -> None:
    rs = '''struct S;
impl S {
    fn make(a: i32, b: i32) -> S { S }
    fn go(&self, a: i32, b: i32) -> i32 { a }
    fn run(&self) -> i32 { let s = Self::make(1, 2); let t = S::make(3, 4); self.go(5, 6) + s.go(7, 8) }
}
'''
    new = rs.replace("fn make(a: i32, b: i32)", "fn make(b: i32, a: i32)")
    assert "Self::make(2, 1); let t = S::make(4, 3); self.go(5, 6) + s.go(7, 8)" in applied(new, run("rust", rs, new))
    new = rs.replace("fn go(&self, a: i32, b: i32)", "fn go(&self, b: i32)")
    assert "Self::make(1, 2); let t = S::make(3, 4); self.go(6) + s.go(8)" in applied(new, run("rust", rs, new))


def test_python_return_shape_adds_an_unpacking_target() -> None:
    py = '''class Reader:
    def span(self, text):
        start = 0
        return start, len(text)

    def use(self):
        a, b = self.span("x")
        (c, d) = self.span("y")
        whole = self.span("z")
        for e, f in [self.span("w")]:
            pass
        return a, b, c, d, whole
'''
    new = py.replace("return start, len(text)", "return start, len(text), text.count('\\n')")
    a = run("python", py, new)
    assert a.kind == "return_added" and [s.hint for s in a.sites] == ["_", "_"]
    got = applied(new, a)
    assert "        a, b, _ = self.span(\"x\")\n        (c, d, _) = self.span(\"y\")\n        whole = self" in got
    new = py.replace("return start, len(text)", "return start, end, len(text)")
    assert '        a, end, b = self.span("x")' in applied(new, run("python", py, new))
    assert run("python", py, py.replace("return start, len(text)", "return start, 1")).kind == "none"
