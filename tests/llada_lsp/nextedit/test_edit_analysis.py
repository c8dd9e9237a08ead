"""Edit analysis on real tree-sitter grammars: the edit's kind and its follow-up sites."""

from __future__ import annotations

import pytest

from llada_lsp.nextedit.edit_analysis import Analysis, analyze, common_ends
from llada_lsp.text.syntax import parser_for


def run(lang: str, old: str, new: str) -> Analysis:
    p = parser_for(lang)
    assert p is not None
    return analyze(lang, old, new, p.parse(old.encode()), p.parse(new.encode()))


def applied(text: str, a: Analysis, fills: dict[int, str] | None = None) -> str:
    for k, s in sorted(enumerate(a.sites), key=lambda ks: -ks[1].start):
        body = s.prior if s.prior is not None else (fills or {})[k]
        text = text[:s.start] + s.before + body + s.after + text[s.end:]
    return text


PY_OLD = '''def total(items, rate):
    count = 0
    for item in items:
        count += item.count * rate  # count the items
    print("count", count)
    return [count for count in range(count)]


def other(count):
    return count
'''


def test_common_ends() -> None:
    assert common_ends("abcXdef", "abcYYdef") == (3, 3)
    assert common_ends("aaa", "aaaa") == (3, 0)


def test_python_rename_skips_distractors() -> None:
    new = PY_OLD.replace("    count = 0", "    n_total = 0", 1)
    a = run("python", PY_OLD, new)
    assert a.kind == "rename" and "count -> n_total" in a.detail
    # the binding's uses follow; the attribute, the comment, the string, the comprehension's
    # own `count` and the other function's parameter do not
    want = new
    for use, renamed in (("count += item", "n_total += item"), ('print("count", count)', 'print("count", n_total)'),
                         ("range(count)]", "range(n_total)]")):
        want = want.replace(use, renamed, 1)
    assert want.count("n_total") == 4
    assert applied(new, a) == want


def test_python_parameter_rename_and_partial_updates() -> None:
    new = PY_OLD.replace("def total(items, rate)", "def total(things, rate)")
    a = run("python", PY_OLD, new)
    assert [new[s.start:s.end] for s in a.sites] == ["items"] and a.sites[0].prior == "things"
    # the user already renamed the use: the same rename, nothing left to do
    done = new.replace("in items:", "in things:")
    b = run("python", PY_OLD, done)
    assert b.kind == "rename" and b.sites == ()


def test_python_use_switched_is_no_rename() -> None:
    new = PY_OLD.replace("return count\n", "return other\n")
    assert run("python", PY_OLD, new).kind == "none"


def test_python_attribute_and_method_rename() -> None:
    old = '''class A:
    def __init__(self, b):
        self.size = b.size

    def grow(self):
        return self.size + 1

    def twice(self):
        return self.grow() + other.grow()
'''
    a = run("python", old, old.replace("self.size = b", "self.length = b"))
    assert a.kind == "rename" and len(a.sites) == 1  # b.size: another object's attribute
    new = old.replace("def grow(self)", "def enlarge(self)")
    b = run("python", old, new)
    assert applied(new, b).count("self.enlarge()") == 1 and "other.grow()" in applied(new, b)


def test_python_parameter_added_removed_reordered() -> None:
    old = '''def area(w, h):
    return w * h


x = area(2, 3)
y = area(width, height)
'''
    new = old.replace("def area(w, h)", "def area(w, h, scale)")
    a = run("python", old, new)
    assert a.kind == "param_added" and len(a.sites) == 2 and all(s.prior is None for s in a.sites)
    assert applied(new, a, {0: "1", 1: "k"}).endswith("x = area(2, 3, 1)\ny = area(width, height, k)\n")
    new = old.replace("def area(w, h)", "def area(h)")
    b = run("python", old, new)
    assert b.kind == "param_removed" and applied(new, b).endswith("x = area(3)\ny = area(height)\n")
    new = old.replace("def area(w, h)", "def area(h, w)")
    c = run("python", old, new)
    assert c.kind == "param_reordered" and applied(new, c).endswith("x = area(3, 2)\ny = area(height, width)\n")


def test_python_noise_edits() -> None:
    for new in (PY_OLD.replace('"count"', '"total"'), PY_OLD.replace("count = 0", "count = 1"),
                PY_OLD.replace("    return [", "    log(count)\n    return [")):
        assert run("python", PY_OLD, new).kind == "none"


JS_OLD = '''function scale(v, k) {
  const out = v * k;
  const f = (out) => out + 1;
  return f(out) + obj.out;
}
const r = scale(1, 2);
'''


@pytest.mark.parametrize("lang", ["javascript", "typescript"])
def test_js_rename_and_params(lang: str) -> None:
    new = JS_OLD.replace("const out = v", "const res = v")
    a = run(lang, JS_OLD, new)
    assert applied(new, a).splitlines()[3] == "  return f(res) + obj.out;"
    assert "(out) => out + 1" in applied(new, a)
    new = JS_OLD.replace("function scale(v, k)", "function scale(k, v)")
    b = run(lang, JS_OLD, new)
    assert b.kind == "param_reordered" and "scale(2, 1)" in applied(new, b)


def test_go_rename_and_param_added() -> None:
    old = '''package m

func sum(xs []int) int {
	t := 0
	for _, x := range xs {
		t += x
	}
	return t
}

func use() int { return sum(nil) }
'''
    new = old.replace("\tt := 0", "\ttotal := 0")
    a = run("go", old, new)
    assert a.kind == "rename" and len(a.sites) == 2
    new = old.replace("func sum(xs []int)", "func sum(xs []int, base int)")
    b = run("go", old, new)
    assert b.kind == "param_added" and applied(new, b, {0: "0"}).endswith("return sum(nil, 0) }\n")


def test_rust_rename_and_param_removed() -> None:
    old = '''fn dist(a: f64, b: f64) -> f64 {
    let d = a - b;
    let g = |d: f64| d * 2.0;
    d.abs() + g(d)
}

fn main() { let s = dist(1.0, 2.0); }
'''
    new = old.replace("let d = a - b", "let delta = a - b")
    a = run("rust", old, new)
    assert applied(new, a).splitlines()[3] == "    delta.abs() + g(delta)"
    new = old.replace("fn dist(a: f64, b: f64)", "fn dist(a: f64)")
    b = run("rust", old, new)
    assert b.kind == "param_removed" and applied(new, b).endswith("dist(1.0); }\n")


def test_unsupported_language_is_none() -> None:
    assert analyze("lua", "a", "b", None, None).kind == "none"  # type: ignore[arg-type]


FNMATCH = '''import os


def fnmatch(name, pat):
    name = os.path.normcase(name)
    pat = os.path.normcase(pat)
    return fnmatchcase(name, pat)


def other(pat):
    return pat
'''


def test_a_renamed_rebinding_leaves_the_parameter_and_the_uses_before_it() -> None:
    new = FNMATCH.replace("    pat = os.path", "    npat = os.path")
    a = run("python", FNMATCH, new)
    assert a.kind == "rename" and a.detail == "pat -> npat (assignment)"
    # the parameter (a public keyword name) and normcase(pat) are the parameter's: only the later use follows
    assert applied(new, a) == new.replace("fnmatchcase(name, pat)", "fnmatchcase(name, npat)")
    # the parameter itself renamed: every use in the function is its
    renamed = FNMATCH.replace("def fnmatch(name, pat)", "def fnmatch(name, pattern)")
    assert applied(renamed, run("python", FNMATCH, renamed)) == renamed.replace(
        "    pat = os.path.normcase(pat)", "    pattern = os.path.normcase(pattern)").replace(
        "fnmatchcase(name, pat)", "fnmatchcase(name, pattern)")


def test_a_rebinding_ends_at_the_next_and_is_not_followed_from_a_branch() -> None:
    old = "def f(x, c):\n    x = g(x)\n    y = x\n    x = h(x)\n    return x + y\n"
    new = old.replace("    x = g(x)", "    z = g(x)")
    assert applied(new, run("python", old, new)) == new.replace("    y = x", "    y = z")
    branch = "def f(x, c):\n    if c:\n        x = g(x)\n    return x\n"
    a = run("python", branch, branch.replace("        x = g", "        z = g"))
    assert a.kind == "rename" and a.sites == ()  # which binding `return x` sees depends on c


RECEIVERS = '''class Box:
    def put(self, item):
        self.items.append(item)

    @classmethod
    def make(cls, item):
        b = cls()
        b.put(item)
        return b


class Other:
    def put(self, item):
        pass

    @classmethod
    def make(cls):
        o = cls()
        o.put(0)


def fill(box: Box, other: Other, items, x):
    for it in items:
        box.put(it)
        other.put(it)
    b = Box()
    b.put(1)
    c = Box()
    c = Other()
    c.put(2)
    x.put(3)
    return b


bb = Box()
bb.put(4)


def later():
    bb.put(5)
'''


def test_a_method_is_followed_through_receivers_whose_class_the_file_shows() -> None:
    new = RECEIVERS.replace("    def put(self, item):\n        self.items", "    def put(self, item, n):\n        self.items")
    a = run("python", RECEIVERS, new)
    assert a.kind == "param_added"
    lines = new.split("\n")
    got = [lines[new.count("\n", 0, s.start)].strip() for s in a.sites]
    # a local `= Box(...)` or `= cls()` inside Box, a parameter annotated Box, a module-level Box seen from a function;
    # not Other's, not a name bound to either (c), not an unannotated parameter (x)
    assert got == ["b.put(item)", "box.put(it)", "b.put(1)", "bb.put(4)", "bb.put(5)"]


TS_SRC = '''function report(message: string, ...parts: string[]) {
  for (const part of parts) {
    log(part);
  }
  const [head, tail] = split(message);
  return { message, parts, head };
}
'''


@pytest.mark.parametrize("lang", ["typescript", "javascript"])
def test_ts_shorthand_properties_for_of_bindings_rest_and_array_patterns(lang: str) -> None:
    src = TS_SRC if lang == "typescript" else TS_SRC.replace(": string[]", "").replace(": string", "")

    def renamed(old: str, new: str) -> str:
        text = src.replace(old, new, 1)
        a = run(lang, src, text)
        assert a.kind == "rename", a
        return applied(text, a)

    # a shorthand property keeps its key: `{ message }` -> `{ message: msg }`
    assert renamed("report(message", "report(msg") == src.replace("report(message", "report(msg").replace(
        "split(message)", "split(msg)").replace("{ message,", "{ message: msg,")
    # a rest parameter
    assert renamed("...parts", "...pieces") == src.replace("...parts", "...pieces").replace(
        "of parts", "of pieces").replace(" parts, head }", " parts: pieces, head }")
    # a `for (const x of ...)` binding reaches its body only
    assert renamed("const part of", "const p of") == src.replace("const part of", "const p of").replace(
        "log(part)", "log(p)")
    # an array destructuring binding
    assert renamed("[head, tail]", "[first, tail]") == src.replace("[head, tail]", "[first, tail]").replace(
        " head }", " head: first }")


def test_a_for_of_over_an_outer_variable_binds_nothing() -> None:
    src = "let s = 0;\nfor (s of xs) {\n  use(s);\n}\nuse(s);\n"
    a = run("typescript", src, src.replace("for (s of", "for (t of"))
    assert a.kind != "rename" or not a.sites  # an assignment to the outer `s`, not a new binding


TS_MORE = '''/**
 * Waits.
 * @param {number} delay The delay.
 * @param scheduler Where to run.
 */
export function wait(delay: number, scheduler?: Scheduler): Op {
  let done$: Subject<void>;
  try {
    done$ = run(delay, scheduler);
  } catch (err) {
    report(err);
  }
  const on: (...args: any[]) => void = (...rest) => use(rest);
  ({ delay = 1 } = options);
  return done$;
}

class Replay {
  constructor(private _size = 1) {
    this._size = Math.max(1, _size);
  }
}
'''


def ts_renamed(old: str, new: str) -> str:
    text = TS_MORE.replace(old, new, 1)
    a = run("typescript", TS_MORE, text)
    assert a.kind == "rename", a
    return applied(text, a)


def test_ts_renames_follow_jsdoc_dollar_names_catch_and_parameter_properties() -> None:
    # the JSDoc @param and a destructuring assignment's shorthand ({ delay } = ... -> { delay: pause })
    assert ts_renamed("wait(delay:", "wait(pause:") == TS_MORE.replace("wait(delay:", "wait(pause:").replace(
        "{number} delay", "{number} pause").replace("run(delay,", "run(pause,").replace(
        "({ delay = 1 }", "({ delay: pause = 1 }")
    assert ts_renamed("scheduler?: Scheduler", "sched?: Scheduler") == TS_MORE.replace(
        "scheduler?: Scheduler", "sched?: Scheduler").replace("@param scheduler", "@param sched").replace(
        "delay, scheduler)", "delay, sched)")
    # `$` belongs to the name
    assert ts_renamed("let done$", "let finished$") == TS_MORE.replace("done$", "finished$")
    # a catch clause's binding
    assert ts_renamed("catch (err)", "catch (e)") == TS_MORE.replace("catch (err)", "catch (e)").replace(
        "report(err)", "report(e)")
    # a parameter property is a property too: this._size follows
    assert ts_renamed("private _size", "private _cap") == TS_MORE.replace("_size", "_cap")


def test_a_function_types_parameter_reaches_nothing_outside_the_type() -> None:
    a = run("typescript", TS_MORE, TS_MORE.replace("(...args: any[])", "(...items: any[])"))
    assert a.sites == ()  # not `rest` nor anything of the function around it
