"""Tasks of `bench/next_edit.py` on the sources written for it (bench/data/next_edit: the
held-out standard library has no dataclass, NamedTuple, Go, Rust or JS code):

- `field_added`: a field of a record removed from its definition and from every constructor,
  then typed back at the definition. True follow-ups: each constructor's argument list (Python
  call) or body (Go keyed composite literal, Rust struct expression) as it was. Python calls
  with the field passed positionally or by keyword, Go literals keyed (unkeyed ones are not
  constructors this kind follows: Go zero-fills them, so they are left out of the truth too).
- `param_added` / `param_removed` / `param_reordered` of a *method* in JS, Go and Rust: every
  call of it in the file (its name is unique there, so the calls are `.name(` and `::name(`).
- `return_added` (Python): a value of a function's returned tuple removed from its `return` and
  from every `a, b, c = name(...)` unpacking of it, then typed back at the `return`. True
  follow-ups: each unpacking's targets as they were (the held-out files hold no function whose
  returned tuple of 3 or more values is unpacked in the same file: bench/data/next_edit/returns.py).

The oracle reads the trees with the bench's own walk (not `llada_lsp.nextedit.edit_analysis`).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from tree_sitter import Node

from llada_lsp.text.syntax import parser_for

DATA = Path(__file__).resolve().parent / "data" / "next_edit"
FILES = {"python": "records.py", "go": "shapes.go", "rust": "inventory.rs", "javascript": "widgets.js"}
RETURNS = "returns.py"
RECORD = {"python": "class_definition", "go": "type_spec", "rust": "struct_item"}
METHOD = {"javascript": "method_definition", "go": "method_declaration", "rust": "function_item"}
CALLEE = {"member_expression": "property", "selector_expression": "field", "field_expression": "field",
          "scoped_identifier": "name"}


def parse(lang: str, text: str) -> Node:
    parser = parser_for(lang)
    if parser is None:
        raise SystemExit(f"no grammar for {lang}")
    return parser.parse(text.encode()).root_node


def walk(n: Node) -> Iterator[Node]:
    stack = [n]
    while stack:
        cur = stack.pop()
        yield cur
        stack.extend(reversed(cur.children))


def text_of(n: Node | None) -> str:
    return (n.text or b"").decode() if n is not None else ""


def apply(text: str, edits: list[tuple[int, int, str]]) -> str:
    for a, b, t in sorted(edits, reverse=True):
        text = text[:a] + t + text[b:]
    return text


def spans(edits: list[tuple[int, int, str]]) -> list[tuple[int, int]]:
    """Where each edit's text lies once all are applied (edits sorted by start)."""
    out, shift = [], 0
    for a, b, t in sorted(edits):
        out.append((a + shift, a + shift + len(t)))
        shift += len(t) - (b - a)
    return out


def _line_span(text: str, n: Node) -> tuple[int, int]:
    a = text.rfind("\n", 0, n.start_byte) + 1
    b = text.find("\n", n.end_byte)
    return a, b + 1


def _fields(lang: str, rec: Node) -> list[Node]:
    if lang == "python":
        body = rec.child_by_field_name("body")
        out = []
        for st in body.named_children if body is not None else []:
            asg = st.named_children[0] if st.type == "expression_statement" and st.named_children else None
            if asg is not None and asg.type == "assignment" and asg.child_by_field_name("type") is not None:
                out.append(asg)
        return out
    body = rec.child_by_field_name("type" if lang == "go" else "body")
    if lang == "go" and body is not None:
        body = next((c for c in body.named_children if c.type == "field_declaration_list"), None)
    return [c for c in body.named_children if c.type == "field_declaration"] if body is not None else []


def _field_name(lang: str, f: Node) -> str:
    return text_of(f.child_by_field_name("left" if lang == "python" else "name"))


def _elements(lang: str, body: Node) -> list[Node]:
    return [c for c in body.named_children if c.type not in ("comment", "line_comment")]


def _key(lang: str, e: Node) -> str:
    if lang == "python":
        return text_of(e.child_by_field_name("name")) if e.type == "keyword_argument" else ""
    if lang == "go":
        return text_of(e.named_children[0]) if e.type == "keyed_element" else ""
    return text_of(e.child_by_field_name("field")) if e.type == "field_initializer" else \
        text_of(e) if e.type == "shorthand_field_initializer" else ""


def _without(text: str, lang: str, body: Node, k: int) -> str:
    """The body (argument list / literal) with its element `k` taken out, as a person would."""
    els = _elements(lang, body)
    e = els[k]
    if body.start_point[0] != body.end_point[0]:  # one element a line
        a, b = _line_span(text, e)
        return text[body.start_byte:a] + text[b:body.end_byte]
    a = els[k - 1].end_byte if k > 0 else e.start_byte
    b = e.end_byte if k > 0 else (els[1].start_byte if len(els) > 1 else e.end_byte)
    return text[body.start_byte:a] + text[b:body.end_byte]


def field_task(lang: str, text: str, rng: random.Random, make: Callable[..., Any]) -> Any | None:
    root = parse(lang, text)
    recs = [n for n in walk(root) if n.type == RECORD[lang] and n.child_by_field_name("name") is not None]
    if lang == "go":
        recs = [r for r in recs if text_of(r.child_by_field_name("type")).startswith("struct")]
    rec = rng.choice(recs)
    name = text_of(rec.child_by_field_name("name"))
    fields = _fields(lang, rec)
    k = rng.randrange(len(fields))
    fname = _field_name(lang, fields[k])
    bodies: list[Node | None] = []
    for n in walk(root):
        if lang == "python" and n.type == "call" and text_of(n.child_by_field_name("function")) == name:
            bodies.append(n.child_by_field_name("arguments"))
        elif lang == "go" and n.type == "composite_literal" and text_of(n.child_by_field_name("type")) == name:
            bodies.append(n.child_by_field_name("body"))
        elif lang == "rust" and n.type == "struct_expression" and (
                text_of(n.child_by_field_name("name")) == name or (
                text_of(n.child_by_field_name("name")) == "Self" and _impl_of(n) == name)):
            bodies.append(n.child_by_field_name("body"))
    edits = []
    for body in bodies:
        if body is None:
            continue
        els = _elements(lang, body)
        keys = [_key(lang, e) for e in els]
        if fname in keys:
            j = keys.index(fname)
        elif lang == "python" and k < len(els) and all(not x for x in keys[:k + 1]):
            j = k  # positional
        else:
            continue
        edits.append((body.start_byte, body.end_byte, _without(text, lang, body, j), text_of(body)))
    if not edits:
        return None
    a, b = _line_span(text, fields[k])
    new = apply(text, [(x, y, o) for x, y, o, _ in edits])
    old = apply(text, [(x, y, o) for x, y, o, _ in edits] + [(a, b, "")])
    truth_spans = spans([(x, y, o) for x, y, o, _ in edits])
    line = new.count("\n", 0, a)
    return make("field_added", FILES[lang], old, new, line,
                [(s, e, orig) for (s, e), (_, _, _, orig) in zip(truth_spans, edits, strict=True)],
                fname=name, param=fname, index=k, lang=lang)


def _impl_of(n: Node) -> str:
    p = n.parent
    while p is not None and p.type != "impl_item":
        p = p.parent
    return text_of(p.child_by_field_name("type")) if p is not None else ""


def method_task(kind: str, lang: str, text: str, rng: random.Random, make: Callable[..., Any]) -> Any | None:
    root = parse(lang, text)
    defs = [n for n in walk(root) if n.type == METHOD[lang] and (lang != "rust" or _impl_of(n))]
    rng.shuffle(defs)
    for fn in defs:
        plist, name_node = fn.child_by_field_name("parameters"), fn.child_by_field_name("name")
        mname = text_of(name_node)
        if plist is None or mname in ("constructor", "new") or plist.start_point[0] != plist.end_point[0]:
            continue
        recv = [c for c in plist.named_children if c.type == "self_parameter"]
        params = [c for c in plist.named_children if c.type != "self_parameter"]
        if len(params) < (2 if kind == "param_reordered" else 1):
            continue
        calls = []
        for n in walk(root):
            f = n.child_by_field_name("function") if n.type == "call_expression" else None
            if f is not None and f.type in CALLEE and text_of(f.child_by_field_name(CALLEE[f.type])) == mname:
                args = n.child_by_field_name("arguments")
                if args is not None and len(args.named_children) == len(params) and args.start_point[0] == args.end_point[0]:
                    calls.append(args)
        if not calls:
            continue
        i = rng.randrange(len(params))
        ptexts = [text_of(p) for p in params]
        head = [text_of(r) for r in recv]
        arg_of = {c.id: [text_of(x) for x in c.named_children] for c in calls}
        joined = lambda parts: "(" + ", ".join(parts) + ")"  # noqa: E731
        if kind == "param_added":
            body_edits = [(c.start_byte, c.end_byte, joined(arg_of[c.id][:i] + arg_of[c.id][i + 1:]), joined(arg_of[c.id]))
                          for c in calls]
            new = apply(text, [(a, b, o) for a, b, o, _ in body_edits] + [(plist.start_byte, plist.end_byte,
                                                                            joined(head + ptexts))])
            old = apply(text, [(a, b, o) for a, b, o, _ in body_edits] + [(plist.start_byte, plist.end_byte,
                                                                            joined(head + ptexts[:i] + ptexts[i + 1:]))])
            moves = [(a, b, o) for a, b, o, _ in body_edits] + [(plist.start_byte, plist.end_byte, joined(head + ptexts))]
            want = [n for _a, _b, _o, n in body_edits]
        else:
            if kind == "param_removed":
                perm = [x for x in range(len(params)) if x != i]
            else:
                j = i + 1 if i + 1 < len(params) else i - 1
                perm = list(range(len(params)))
                perm[i], perm[j] = perm[j], perm[i]
            old = text
            moves = [(c.start_byte, c.end_byte, text_of(c)) for c in calls] + [
                (plist.start_byte, plist.end_byte, joined(head + [ptexts[x] for x in perm]))]
            new = apply(text, moves[-1:])
            want = [joined([arg_of[c.id][x] for x in perm]) for c in calls]
        sp = spans(moves)
        order = sorted(range(len(moves)), key=lambda q: moves[q][0])
        where = {q: sp[r] for r, q in enumerate(order)}
        truth = [(where[q][0], where[q][1], want[q]) for q in range(len(calls))]
        line = new[:where[len(calls)][0]].count("\n")  # the def's line in `new`
        return make(kind, FILES[lang], old, new, line, truth, fname=mname, param=ptexts[i], index=i, lang=lang)
    return None


def _unpackings(root: Node, name: str, n: int) -> list[Node]:
    """The target lists of every `t1, ..., tn = name(...)` / `= x.name(...)` in the file."""
    out = []
    for asg in walk(root):
        right, left = asg.child_by_field_name("right"), asg.child_by_field_name("left")
        if asg.type != "assignment" or right is None or right.type != "call" or left is None:
            continue
        f = right.child_by_field_name("function")
        callee = text_of(f.child_by_field_name("attribute")) if f is not None and f.type == "attribute" else text_of(f)
        if callee == name and left.type == "pattern_list" and len(left.named_children) == n:
            out.append(left)
    return out


def return_task(text: str, rng: random.Random, make: Callable[..., Any]) -> Any | None:
    root = parse("python", text)
    fns = [n for n in walk(root) if n.type == "function_definition"]
    rng.shuffle(fns)
    for fn in fns:
        rets = [n for n in walk(fn) if n.type == "return_statement" and n.named_children
                and n.named_children[0].type == "expression_list"]
        if len(rets) != 1 or rets[0].start_point[0] != rets[0].end_point[0]:
            continue
        tup = rets[0].named_children[0]
        vals = [text_of(c) for c in tup.named_children if c.type != "comment"]
        name = text_of(fn.child_by_field_name("name"))
        unpacks = _unpackings(root, name, len(vals)) if len(vals) >= 3 else []
        if not unpacks:
            continue
        i = rng.randrange(len(vals))
        targets = {p.id: [text_of(c) for c in p.named_children] for p in unpacks}
        reduced = [(p.start_byte, p.end_byte, ", ".join(targets[p.id][:i] + targets[p.id][i + 1:])) for p in unpacks]
        old = apply(text, reduced + [(tup.start_byte, tup.end_byte, ", ".join(vals[:i] + vals[i + 1:]))])
        new = apply(text, reduced)
        moves = reduced + [(tup.start_byte, tup.end_byte, text_of(tup))]
        sp = spans(moves)
        where = {q: sp[r] for r, q in enumerate(sorted(range(len(moves)), key=lambda q: moves[q][0]))}
        truth = [(where[q][0], where[q][1], ", ".join(targets[p.id])) for q, p in enumerate(unpacks)]
        hint = vals[i] if vals[i].isidentifier() else "_"
        line = new.count("\n", 0, where[len(unpacks)][0])  # the return's line in `new`
        return make("return_added", RETURNS, old, new, line, truth, fname=name, param=hint, index=i)
    return None


def written_tasks(per_kind: int, seed: int, make: Callable[..., Any]) -> list[Any]:
    """Distinct tasks (old text, new text) per (kind, language), at most `per_kind` each."""
    rng = random.Random(seed)
    texts = {lang: (DATA / f).read_text() for lang, f in FILES.items()}
    out: list[Any] = []
    texts["returns"] = (DATA / RETURNS).read_text()
    plan = [("field_added", lang) for lang in ("python", "go", "rust")] + [
        (k, lang) for k in ("param_added", "param_removed", "param_reordered") for lang in ("javascript", "go", "rust")]
    plan.append(("return_added", "returns"))  # last: the tasks drawn before it stay as they were
    for kind, lang in plan:
        seen: set[tuple[str, str]] = set()
        for _ in range(per_kind * 30):
            if len(seen) >= per_kind:
                break
            t = field_task(lang, texts[lang], rng, make) if kind == "field_added" else \
                return_task(texts[lang], rng, make) if kind == "return_added" else \
                method_task(kind, lang, texts[lang], rng, make)
            if t is not None and (t.old, t.new) not in seen:
                seen.add((t.old, t.new))
                out.append(t)
    return out
