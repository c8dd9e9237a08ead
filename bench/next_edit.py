"""Next-edit suggestions: after one real-looking edit, are the follow-ups found and right?

    python bench/next_edit.py [--quick] [--per-kind N] [--models tiny-code,mini-code] [--seed 0]
                              [--threads 1] [--site-tokens 12] [--analysis-lines 5000]

Tasks come from the held-out standard-library files of `engine/train/heldout.txt` (never
training files), one edit each, the language server's own pipeline run on it
(`llada_lsp.edit_analysis.analyze` -> `llada_lsp.edit_window` suggestions, masked fills through
`TextEngine.complete`, `keep`: off the edited line, no parse error added). Kinds:
- `rename`: a parameter or local of a function (or a module-level function) renamed at its
  binding to a name of another token count; its true sites are found by an oracle independent
  of the analysis: CPython's `symtable` says in which scope each name is local, and every
  identifier use of the old name resolving to the renamed binding is a site. `distractor`
  marks tasks where a textual rename of the file is wrong (the name in strings or comments,
  in other functions, shadowed, or an attribute of another object);
- `param_added`: a real parameter of a module-level function removed from its def and its
  calls, then typed back at the def: the true follow-ups are the original arguments;
- `param_removed`, `param_reordered` (two parameters swapped): the calls' arguments follow;
- `noise`: a changed string or number, a comment line added, a use switched to another
  name: any suggestion is a false positive.
- `field_added` (Python dataclass/NamedTuple, Go, Rust) and the JS/Go/Rust method-call rows
  `param_* [lang]`: on sources written for this bench (`bench/next_edit_written.py`,
  bench/data/next_edit: the held-out stdlib files hold no dataclass and no other language),
  distinct tasks only, so their counts are smaller.

Per kind: location precision and recall (a suggestion is located when it changes exactly the
span of a true site's call argument list or identifier), content exact match at located
sites (the site's text after the suggestion equals the truth), false-positive rate on noise
(edits with any suggestion), p50 latency from the edit to the answer (analysis + fills +
checks; the trees of the two texts are given, as the server holds them), and which part wrote
the content (`analysis`, `model` or `placeholder`: an added argument or field no fill reaches
is the name, marked for the user to type over, as the server shows it; its content is exact
only where the name was the argument). Intervals: Wilson 95%. Beside it the textual baseline (a
file-wide whole-word rename of a changed word; for parameter changes a comma split of each
`name(` call's arguments: the parameter's name inserted, the argument removed or swapped).
The gate: per model, the lowest confidence threshold on model fills with overall precision
>= 0.9, and the recall there (on by default only when >= 0.5): analysis suggestions and fills
count when exact, a placeholder when located (it claims a place, not content). Also the analysis alone on a
`--analysis-lines` file (held-out files joined). Prints a table; ends with one JSON line.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import re
import statistics
import symtable
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tree_sitter_python
from tree_sitter import Language, Node, Parser

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.next_edit_written import written_tasks  # noqa: E402
from bench.tasks import parses  # noqa: E402
from engine.train.corpus import heldout_files, read_text  # noqa: E402
from llada_lsp.edit_analysis import analyze  # noqa: E402
from llada_lsp.edit_window import (  # noqa: E402
    FILL_PREFIX_CHARS,
    FILL_ROWS,
    FILL_SUFFIX_CHARS,
    Suggested,
    fill_request,
    from_analysis,
    from_fill,
    from_placeholder,
    keep,
)
from llada_lsp.positions import LineIndex  # noqa: E402
from llada_lsp.syntax import count_errors, parser_for  # noqa: E402

PY = Language(tree_sitter_python.language())
PARSER = Parser(PY)
KINDS = ("rename", "param_added", "param_removed", "param_reordered", "field_added", "noise")
NEW_NAMES = ("v", "n", "res", "total", "entry", "node_value", "current_item_count", "parsed_result_list")
SCOPES = ("function_definition", "lambda", "class_definition", "list_comprehension", "set_comprehension",
          "dictionary_comprehension", "generator_expression")


@dataclass(frozen=True)
class Truth:
    """A true follow-up: new[start:end] (the smallest span holding the change: an identifier or
    a call's argument list) must read `text`."""

    start: int
    end: int
    text: str


@dataclass
class Task:
    kind: str
    source: str
    old: str
    new: str
    line: int  # the edited line (in `new`): suggestions may not touch it
    truth: list[Truth]
    distractor: bool = False
    fname: str = ""
    param: str = ""
    index: int = 0
    lang: str = "python"

    @property
    def key(self) -> str:
        """The table's row: the kind, with the language when it is not Python."""
        return self.kind if self.lang == "python" else f"{self.kind} [{self.lang}]"


def make_task(kind: str, source: str, old: str, new: str, line: int, truth: list[tuple[int, int, str]],
              **kw: Any) -> Task:
    return Task(kind, source, old, new, line, [Truth(*x) for x in truth], **kw)


def walk(n: Node) -> Iterator[Node]:
    stack = [n]
    while stack:
        cur = stack.pop()
        yield cur
        stack.extend(reversed(cur.children))


def text_of(n: Node) -> str:
    return (n.text or b"").decode()


# ------------------------------------------------------------------ the rename oracle (symtable)

def scope_tables(root: Node, source: str) -> dict[int, symtable.SymbolTable] | None:
    """tree-sitter scope node id -> CPython's symbol table, matched in source order per parent."""
    try:
        top = symtable.symtable(source, "<bench>", "exec")
    except SyntaxError:
        return None
    out: dict[int, symtable.SymbolTable] = {root.id: top}

    def kids(n: Node) -> list[Node]:
        res, stack = [], list(reversed(n.children))
        while stack:
            c = stack.pop()
            if c.type in SCOPES:
                res.append(c)
            else:
                stack.extend(reversed(c.children))
        return res

    todo = [(root, top)]
    while todo:
        node, table = todo.pop()
        ts_kids = kids(node) if node.type != "root" else kids(node)
        if node.type in SCOPES and node.type != "lambda":
            ts_kids = [k for k in kids(node)]
        st_kids = table.get_children()
        if len(ts_kids) != len(st_kids):
            return None
        for a, b in zip(ts_kids, st_kids, strict=True):
            out[a.id] = b
            todo.append((a, b))
    return out


def resolve(n: Node, tables: dict[int, symtable.SymbolTable], name: str) -> int | None:
    """The id of the scope node whose binding `n` (a use of `name`) refers to."""
    scope = n.parent
    first = True
    while scope is not None:
        if scope.id in tables and scope.parent is not None or scope.parent is None:
            table = tables.get(scope.id)
            if table is not None and (first or table.get_type() != "class"):
                try:
                    sym = table.lookup(name)
                except KeyError:
                    sym = None
                if sym is not None and (sym.is_global() and not sym.is_local()):
                    return _root(scope).id
                if sym is not None and (sym.is_local() or sym.is_parameter()):
                    return scope.id
            first = False
        scope = scope.parent
    return None


def _root(n: Node) -> Node:
    while n.parent is not None:
        n = n.parent
    return n


def is_use(n: Node) -> bool:
    p = n.parent
    if p is None:
        return False
    if p.type == "attribute" and p.child_by_field_name("attribute") == n:
        return False
    return not (p.type == "keyword_argument" and p.child_by_field_name("name") == n)


def _scope_of(n: Node, tables: dict[int, Any]) -> Node:
    s = n.parent
    while s is not None and s.id not in tables:
        s = s.parent
    return s if s is not None else _root(n)


# ------------------------------------------------------------------ tasks

def files(max_chars: int = 60_000) -> list[tuple[str, str]]:
    fs = sorted((f for f in heldout_files() if f.key.startswith("stdlib/")), key=lambda f: f.key)
    return [(f.key, t) for f in fs if (t := read_text(f)) and len(t) <= max_chars and t.isascii() and parses(t)]


def rename_task(key: str, text: str, rng: random.Random) -> Task | None:
    root = PARSER.parse(text.encode()).root_node
    tables = scope_tables(root, text)
    if tables is None:
        return None
    fns = [n for n in walk(root) if n.type == "function_definition"]
    if not fns:
        return None
    fn = rng.choice(fns)
    binds: list[tuple[Node, int]] = []  # (binding identifier, its scope id)
    params = fn.child_by_field_name("parameters")
    for c in params.named_children if params is not None else []:
        ident = c if c.type == "identifier" else c.child_by_field_name("name") if c.type in (
            "default_parameter", "typed_default_parameter") else c.named_children[0] \
            if c.type == "typed_parameter" and c.named_children else None
        if ident is not None and ident.type == "identifier" and text_of(ident) not in ("self", "cls"):
            binds.append((ident, fn.id))
    body = fn.child_by_field_name("body")
    for n in walk(body) if body is not None else []:
        if n.type == "assignment" and (left := n.child_by_field_name("left")) is not None and left.type == "identifier":
            if _scope_of(left, tables).id == fn.id and all(text_of(b) != text_of(left) for b, _ in binds):
                binds.append((left, fn.id))
    name_node = fn.child_by_field_name("name")
    if fn.parent is not None and fn.parent.type == "module" and name_node is not None:
        binds.append((name_node, root.id))
    if not binds:
        return None
    d, scope_id = rng.choice(binds)
    old = text_of(d)
    sites = [n for n in walk(root) if n.type == "identifier" and text_of(n) == old and n.id != d.id and is_use(n)
             and resolve(n, tables, old) == scope_id]
    if not sites:
        return None
    new = next((x for x in rng.sample(NEW_NAMES, len(NEW_NAMES))
                if not re.search(rf"\b{re.escape(x)}\b", text)), None)
    if new is None:
        return None
    a, b = d.start_byte, d.end_byte
    edited = text[:a] + new + text[b:]
    shift = len(new) - len(old)
    truth = [Truth(n.start_byte + (shift if n.start_byte > a else 0), n.end_byte + (shift if n.start_byte > a else 0),
                   new) for n in sites]
    words = len(re.findall(rf"\b{re.escape(old)}\b", text)) - 1
    return Task("rename", key, text, edited, text.count("\n", 0, a), truth, distractor=words != len(sites))


def _plain_params(fn: Node) -> list[Node] | None:
    p = fn.child_by_field_name("parameters")
    if p is None:
        return None
    out = [c for c in p.named_children if c.type != "comment"]
    return out if out and all(c.type == "identifier" for c in out) else None


def _calls(root: Node, fname: str, n_args: int) -> list[Node] | None:
    """The argument lists of every call of `fname` when all have `n_args` plain positional
    arguments on one line (None otherwise)."""
    out = []
    for n in walk(root):
        if n.type == "identifier" and text_of(n) == fname and n.parent is not None:
            p = n.parent
            if p.type == "function_definition" and p.child_by_field_name("name") == n:
                continue
            if p.type != "call" or p.child_by_field_name("function") != n:
                return None  # used otherwise (passed around): not a clean task
            args = p.child_by_field_name("arguments")
            pos = [c for c in args.named_children if c.type != "comment"] if args is not None else []
            if args is None or args.type != "argument_list" or len(pos) != n_args or any(
                    c.type in ("keyword_argument", "list_splat", "dictionary_splat") for c in pos) \
                    or args.start_point[0] != args.end_point[0]:
                return None
            out.append(args)
    return out or None


def _args_text(args: Node, parts: list[str]) -> str:
    return "(" + ", ".join(parts) + ")"


def param_task(kind: str, key: str, text: str, rng: random.Random) -> Task | None:
    root = PARSER.parse(text.encode()).root_node
    fns = [n for n in root.named_children if n.type == "function_definition"]
    rng.shuffle(fns)
    for fn in fns:
        params = _plain_params(fn)
        need = 2 if kind == "param_reordered" else 1
        plist, name_node = fn.child_by_field_name("parameters"), fn.child_by_field_name("name")
        if params is None or len(params) < need or plist is None or name_node is None \
                or params[0].start_point[0] != plist.end_point[0]:
            continue
        fname = text_of(name_node)
        calls = _calls(root, fname, len(params))
        if calls is None:
            continue
        names = [text_of(p) for p in params]
        args_of = {c.id: [text_of(x) for x in c.named_children if x.type != "comment"] for c in calls}
        i = rng.randrange(len(names))
        if kind == "param_added":
            # before: without the parameter anywhere; after: typed back at the def
            edits = [(plist.start_byte, plist.end_byte, "(" + ", ".join(names[:i] + names[i + 1:]) + ")",
                      "(" + ", ".join(names) + ")")]
            edits += [(c.start_byte, c.end_byte, _args_text(c, args_of[c.id][:i] + args_of[c.id][i + 1:]),
                       _args_text(c, args_of[c.id])) for c in calls]
            old = _apply(text, [(a, b, o) for a, b, o, _ in edits])
            new = _apply(text, [(a, b, o) if a != plist.start_byte else (a, b, n) for a, b, o, n in edits])
            truth_after = [n for a, _b, _o, n in edits if a != plist.start_byte]
            spans = _spans(new, [(a, b, o) if a != plist.start_byte else (a, b, n) for a, b, o, n in edits],
                           plist.start_byte)
            truth = [Truth(s, e, t) for (s, e), t in zip(spans, truth_after, strict=True)]
            line = old.count("\n", 0, plist.start_byte)
            return Task(kind, key, old, new, line, truth, fname=fname, param=names[i], index=i)
        if kind == "param_removed":
            new_names = names[:i] + names[i + 1:]
            want = {c.id: args_of[c.id][:i] + args_of[c.id][i + 1:] for c in calls}
        else:
            j = i + 1 if i + 1 < len(names) else i - 1
            perm = list(range(len(names)))
            perm[i], perm[j] = perm[j], perm[i]
            new_names = [names[k] for k in perm]
            want = {c.id: [args_of[c.id][k] for k in perm] for c in calls}
        new = _apply(text, [(plist.start_byte, plist.end_byte, "(" + ", ".join(new_names) + ")")])
        moves = [(plist.start_byte, plist.end_byte, "(" + ", ".join(new_names) + ")")] + \
            [(c.start_byte, c.end_byte, text_of(c)) for c in calls]
        spans = _spans(new, moves, plist.start_byte)
        truth = [Truth(s, e, _args_text(c, want[c.id])) for (s, e), c in zip(spans, calls, strict=True)]
        return Task(kind, key, text, new, text.count("\n", 0, plist.start_byte), truth, fname=fname,
                    param=names[i], index=i)
    return None


def _apply(text: str, edits: list[tuple[int, int, str]]) -> str:
    for a, b, t in sorted(edits, reverse=True):
        text = text[:a] + t + text[b:]
    return text


def _spans(after: str, edits: list[tuple[int, int, str]], skip: int) -> list[tuple[int, int]]:
    """Where each edit's text lies in `after` (the def's edit at `skip` left out)."""
    out, shift = [], 0
    for a, b, t in sorted(edits):
        if a != skip:
            out.append((a + shift, a + shift + len(t)))
        shift += len(t) - (b - a)
    return out


def noise_task(key: str, text: str, rng: random.Random) -> Task | None:
    root = PARSER.parse(text.encode()).root_node
    pick = rng.randrange(4)
    nodes = list(walk(root))
    if pick == 0:
        cands = [n for n in nodes if n.type == "string_content" and n.start_point[0] == n.end_point[0]]
        if not cands:
            return None
        n = rng.choice(cands)
        a, b, t = n.start_byte, n.end_byte, text_of(n) + " now"
    elif pick == 1:
        cands = [n for n in nodes if n.type == "integer"]
        if not cands:
            return None
        n = rng.choice(cands)
        a, b, t = n.start_byte, n.end_byte, str(int(text_of(n), 0) + 1) if text_of(n).isdigit() else "7"
    elif pick == 2:
        lines = [m.start() for m in re.finditer(r"(?m)^[ \t]*(?:return|if|for) ", text)]
        if not lines:
            return None
        a = b = rng.choice(lines)
        indent = re.match(r"[ \t]*", text[a:]).group(0)  # type: ignore[union-attr]
        t = f"{indent}# note: check this\n"
    else:  # a use switched to another name: a different variable, nothing else follows
        tables = scope_tables(root, text)
        if tables is None:
            return None
        cands = [n for n in nodes if n.type == "identifier" and is_use(n) and n.parent is not None
                 and n.parent.type in ("argument_list", "return_statement") and text_of(n) not in ("self", "cls")]
        if not cands:
            return None
        n = rng.choice(cands)
        a, b, t = n.start_byte, n.end_byte, text_of(n) + "2"
    new = text[:a] + t + text[b:]
    if not parses(new):
        return None
    return Task("noise", key, text, new, text.count("\n", 0, a), [])


def make_tasks(per_kind: int, seed: int) -> list[Task]:
    texts = files()
    rng = random.Random(seed)
    out: list[Task] = []
    for kind in KINDS:
        if kind == "field_added":
            continue  # no held-out stdlib file has a dataclass: written sources (bench.next_edit_written)
        got, tries = 0, 0
        while got < per_kind and tries < per_kind * 200:
            tries += 1
            key, text = rng.choice(texts)
            t = rename_task(key, text, rng) if kind == "rename" else noise_task(key, text, rng) \
                if kind == "noise" else param_task(kind, key, text, rng)
            if t is not None and (t.truth or kind == "noise"):
                if kind == "rename" and not t.distractor and got >= per_kind // 2 and tries < per_kind * 150:
                    continue  # at least half the renames have distractors (while they can be found)
                out.append(t)
                got += 1
    out += written_tasks(per_kind, seed, make_task)
    for t in out:  # a site that already reads right (two equal arguments swapped) is no follow-up
        t.truth = [tr for tr in t.truth if t.new[tr.start:tr.end] != tr.text]
    return [t for t in out if t.truth or t.kind == "noise"]


# ------------------------------------------------------------------ systems

@dataclass
class Answer:
    suggestions: list[Suggested]
    ms: float
    analysis_ms: float = 0.0
    kind: str = ""
    fill_ms: float = 0.0  # the part of `ms` the masked fills took
    placeholders: dict[tuple[int, int], Suggested] = field(default_factory=dict)  # per masked site, kept


def server_pipeline(t: Task, fill: Callable[[list[Any]], list[tuple[str, float]]] | None, site_tokens: int
                    ) -> Answer:
    """What the language server does (llada_lsp.next_edit), synchronously: analysis, analysis
    suggestions, masked fills (`fill`: CompletionRequests -> (text, weakest confidence) each,
    decoded together as rows of the step loop; None: fills off, the gated default), the
    placeholder of each masked site no fill reaches, checks. Every fill is kept here whatever
    its confidence; `gated` applies a threshold (a fill below it gives way to the placeholder)."""
    parser = parser_for(t.lang)
    assert parser is not None
    old_tree, new_tree = parser.parse(t.old.encode()), parser.parse(t.new.encode())
    t0 = time.perf_counter()
    a = analyze(t.lang, t.old, t.new, old_tree, new_tree)
    t1 = time.perf_counter()
    found = [s for site in a.sites if (s := from_analysis(site)) is not None]
    definition = t.new[a.definition[0]:a.definition[1]] if a.definition else ""
    masked = [x for x in a.sites if x.prior is None]
    f0 = time.perf_counter()
    fills = fill([fill_request(f"b{k}", f"bench{k}", t.source, t.new, site, definition, FILL_PREFIX_CHARS,
                               FILL_SUFFIX_CHARS, site_tokens, None) for k, site in enumerate(masked)]) \
        if fill is not None and masked else [("", 0.0)] * len(masked)
    fill_ms = (time.perf_counter() - f0) * 1000 if fill is not None and masked else 0.0
    holders = [p for site in masked if (p := from_placeholder(site)) is not None]
    for site, (text, conf) in zip(masked, fills, strict=True):
        s = from_fill(site, text, conf)
        found.append(s if s is not None else from_placeholder(site))  # type: ignore[arg-type]
    index, errors = LineIndex.of(t.new), count_errors(new_tree.root_node)
    out = keep(t.lang, t.new, index, [s for s in found if s is not None], (t.line, t.line), errors, new_tree)
    kept_holders = keep(t.lang, t.new, index, holders, (t.line, t.line), errors, new_tree)
    return Answer(out, (time.perf_counter() - t0) * 1000, (t1 - t0) * 1000, a.kind, fill_ms,
                  {(p.start, p.end): p for p in kept_holders})


def textual(t: Task) -> Answer:
    """A find-and-replace user: a changed word renamed file-wide; a parameter change applied to
    each `name(` call by splitting its arguments at commas."""
    t0 = time.perf_counter()
    out: list[Suggested] = []
    if t.kind == "field_added":  # `Name(...)` / `Name{...}` / `Name { ... }` on one line: the name inserted
        label = "" if t.lang == "python" else f"{t.param}: "
        for m in re.finditer(rf"(?<![\w.]){re.escape(t.fname)}(\(|\s?\{{)([^(){{}}\n]*)([)}}])", t.new):
            if t.new.count("\n", 0, m.start()) == t.line:
                continue
            args = [x.strip() for x in m.group(2).split(",") if x.strip()]
            args.insert(min(t.index, len(args)), label + t.param)
            pad = " " if m.group(1).endswith(" {") else ""
            text = m.group(1)[-1] + pad + ", ".join(args) + pad + m.group(3)
            out.append(Suggested(m.start(1) + len(m.group(1)) - 1, m.end(), text, 1.0, "textual"))
    elif t.kind in ("param_added", "param_removed", "param_reordered"):
        lead = r"(?<![\w.])" if t.lang == "python" else r"(?<!\w)"  # methods: `.name(` and `::name(` too
        for m in re.finditer(rf"{lead}{re.escape(t.fname)}\(([^()\n]*)\)", t.new):
            if t.new.rfind("def ", 0, m.start()) == m.start() - 4 or t.new.count("\n", 0, m.start()) == t.line:
                continue
            args = [x.strip() for x in m.group(1).split(",")] if m.group(1).strip() else []
            if t.kind == "param_added":
                args.insert(min(t.index, len(args)), t.param)
            elif t.kind == "param_removed" and t.index < len(args):
                args.pop(t.index)
            elif t.kind == "param_reordered" and len(args) > t.index:
                j = t.index + 1 if t.index + 1 < len(args) else t.index - 1
                args[t.index], args[j] = args[j], args[t.index]
            out.append(Suggested(m.start(1) - 1, m.end(), "(" + ", ".join(args) + ")", 1.0, "textual"))
    else:
        ow, nw = re.findall(r"\w+", t.old), re.findall(r"\w+", t.new)
        diff = [(a, b) for a, b in zip(ow, nw, strict=False) if a != b] if len(ow) == len(nw) else []
        if len(diff) == 1 and re.fullmatch(r"[A-Za-z_]\w*", diff[0][0]):
            o, n = diff[0]
            for m in re.finditer(rf"\b{re.escape(o)}\b", t.new):
                if t.new.count("\n", 0, m.start()) != t.line:
                    out.append(Suggested(m.start(), m.end(), n, 1.0, "textual"))
    return Answer(out, (time.perf_counter() - t0) * 1000)


# ------------------------------------------------------------------ scoring

@dataclass
class Tally:
    suggestions: int = 0
    located: int = 0  # suggestions inside a true site's span
    right: int = 0  # located and the site's text then equals the truth
    sites: int = 0
    sites_located: int = 0
    sites_right: int = 0
    noise_tasks: int = 0
    noise_hit: int = 0
    ms: list[float] = field(default_factory=list)
    analysis_ms: list[float] = field(default_factory=list)
    sources: dict[str, int] = field(default_factory=dict)
    placeholders: int = 0  # suggestions that are placeholders
    placeholders_located: int = 0
    placeholders_right: int = 0  # located and exactly the truth (the name was the argument)
    sites_placeholder_only: int = 0  # sites located by a placeholder that is not exactly right


def score(t: Task, ans: Answer, tally: Tally) -> None:
    tally.suggestions += len(ans.suggestions)
    tally.ms.append(ans.ms)
    tally.analysis_ms.append(ans.analysis_ms)
    if t.kind == "noise":
        tally.noise_tasks += 1
        tally.noise_hit += bool(ans.suggestions)
        return
    tally.sites += len(t.truth)
    located: set[int] = set()
    right: set[int] = set()
    held: set[int] = set()
    for s in ans.suggestions:
        holder = s.source == "placeholder"
        tally.placeholders += holder
        k = next((k for k, tr in enumerate(t.truth) if tr.start <= s.start and s.end <= tr.end
                  and (s.start < tr.end or s.start == s.end)), None)
        if k is None:
            continue
        tr = t.truth[k]
        tally.located += 1
        tally.placeholders_located += holder
        located.add(k)
        got = t.new[tr.start:s.start] + s.text + t.new[s.end:tr.end]
        if got == tr.text:
            tally.right += 1
            tally.placeholders_right += holder
            right.add(k)
            tally.sources[s.source] = tally.sources.get(s.source, 0) + 1
        elif holder:
            held.add(k)
    tally.sites_located += len(located)
    tally.sites_right += len(right)
    tally.sites_placeholder_only += len(held - right)


def wilson(k: int, n: int) -> tuple[float, float]:
    if n == 0:
        return (0.0, 0.0)
    z, p = 1.96, k / n
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return (round(max(0.0, c - h), 3), round(min(1.0, c + h), 3))


def row(system: str, kind: str, tl: Tally) -> dict[str, Any]:
    out: dict[str, Any] = {"system": system, "kind": kind, "suggestions": tl.suggestions,
                           "p50_ms": round(statistics.median(tl.ms), 2) if tl.ms else 0.0}
    if kind == "all":  # every task: the latency from the edit to the answer
        out.update(p95_ms=round(sorted(tl.ms)[int(0.95 * (len(tl.ms) - 1))], 2) if tl.ms else 0.0, tasks=len(tl.ms))
        return out
    if kind == "noise":
        out.update(fp_rate=round(tl.noise_hit / max(1, tl.noise_tasks), 3), fp_ci=wilson(tl.noise_hit, tl.noise_tasks),
                   tasks=tl.noise_tasks)
        return out
    out.update(sites=tl.sites, precision=round(tl.located / tl.suggestions, 3) if tl.suggestions else 0.0,
               precision_ci=wilson(tl.located, tl.suggestions), recall=round(tl.sites_located / max(1, tl.sites), 3),
               recall_ci=wilson(tl.sites_located, tl.sites),
               content_em=round(tl.sites_right / tl.sites_located, 3) if tl.sites_located else 0.0,
               exact_precision=round(tl.right / tl.suggestions, 3) if tl.suggestions else 0.0,
               sources=tl.sources, placeholders=tl.placeholders, placeholders_exact=tl.placeholders_right)
    return out


def evaluate(system: str, tasks: list[Task], answer: Callable[[Task], Answer]) -> tuple[list[dict[str, Any]], list]:
    tallies: dict[str, Tally] = {}
    answers = []
    for t in tasks:
        ans = answer(t)
        answers.append(ans)
        score(t, ans, tallies.setdefault(t.key, Tally()))
        tallies.setdefault("all", Tally()).ms.append(ans.ms)
        if t.kind == "rename" and t.distractor:
            score(t, ans, tallies.setdefault("rename_distractor", Tally()))
    return [row(system, k, tl) for k, tl in tallies.items()], answers


OFF = 1.01  # a fill threshold no confidence reaches: the model's fills off


def passes(s: Suggested, th: float) -> bool:
    """Whether the server shows `s` at fill threshold `th`: the analysis' own suggestions and
    placeholders always, a model fill at or above `th` (below it, the site's placeholder)."""
    return s.source in ("analysis", "placeholder") or s.confidence >= th


def at_threshold(a: Answer, th: float) -> list[Suggested]:
    """The answer as the server shows it at fill threshold `th`."""
    if th > 1.0:  # fills off: no engine job, every masked site its placeholder
        return sorted([s for s in a.suggestions if s.source == "analysis"] + list(a.placeholders.values()),
                      key=lambda s: (s.start, s.end))
    out = []
    for s in a.suggestions:
        if passes(s, th):
            out.append(s)
        elif (p := a.placeholders.get((s.start, s.end))) is not None:
            out.append(p)
    return out


def gate(tasks: list[Task], answers: list[Answer]) -> dict[str, Any]:
    """The lowest fill threshold at which the model's own fills (source "model") are exactly
    right in >= 90% of cases (`OFF` when none is: only the analysis' suggestions remain), and
    the precision and recall of everything suggested there (every kind; a noise suggestion is
    wrong). On by default when that precision is >= 0.9 and the recall >= 0.5."""
    def tally(th: float, model_only: bool) -> Tally:
        tl = Tally()
        for t, a in zip(tasks, answers, strict=True):
            kept = [s for s in at_threshold(a, th) if s.source == "model" or not model_only]
            score(t, Answer(kept, a.ms), tl)
        return tl

    chosen = OFF
    for th in [x / 20 for x in range(20)]:
        m = tally(th, True)
        if m.suggestions and m.right / m.suggestions >= 0.9:
            chosen = th
            break
    m, tl = tally(chosen, True), tally(chosen, False)
    # a placeholder claims a place, not content: it counts as right when it is located
    good = tl.right + tl.placeholders_located - tl.placeholders_right
    good_sites = tl.sites_right + tl.sites_placeholder_only
    p = good / tl.suggestions if tl.suggestions else 0.0
    r = good_sites / max(1, tl.sites)
    return {"threshold": chosen, "model_fills": m.suggestions, "model_fills_right": m.right,
            "precision": round(p, 3), "precision_ci": wilson(good, tl.suggestions), "recall": round(r, 3),
            "recall_ci": wilson(good_sites, tl.sites), "on": p >= 0.9 and r >= 0.5,
            "placeholders": tl.placeholders, "placeholders_located": tl.placeholders_located,
            "placeholders_exact": tl.placeholders_right}


def analysis_speed(lines: int) -> dict[str, Any]:
    """The analysis alone on a `lines`-line file (held-out files joined): a module-level
    function renamed at the top (its uses looked up in the whole file) and a parameter added."""
    body, texts = "", files(200_000)
    for _key, t in texts:
        if body.count("\n") >= lines:
            break
        body += t + "\n"
    body = "\n".join(body.split("\n")[:lines])
    body = re.sub(r"(?m)^(if __name__.*)$", r"\1", body)
    head = "def helper_fn(a, b):\n    return a\n\n\n"
    tail = "\n\nx = helper_fn(1, 2)\ny = helper_fn(3, 4)\n"
    head = "from dataclasses import dataclass\n\n\n@dataclass\nclass Rec:\n    a: int\n    b: int\n\n\n" + head
    head += "def pair(x):\n    return x, x\n\n\n"
    tail += "r = Rec(1, 2)\ns = Rec(a=3, b=4)\np, q = pair(1)\n"
    old = head + body + tail
    cases = {"rename": old.replace("def helper_fn(", "def helper(", 1),
             "param_added": old.replace("def helper_fn(a, b)", "def helper_fn(a, b, c)", 1),
             "field_added": old.replace("    b: int\n", "    b: int\n    c: str\n", 1),
             "return_added": old.replace("    return x, x\n", "    return x, x, x\n", 1)}
    out: dict[str, Any] = {"lines": old.count("\n")}
    ot = PARSER.parse(old.encode())
    for name, new in cases.items():
        nt = PARSER.parse(new.encode())
        ms = []
        for _ in range(15):
            t0 = time.perf_counter()
            a = analyze("python", old, new, ot, nt)
            ms.append((time.perf_counter() - t0) * 1000)
        out[name] = {"kind": a.kind, "sites": len(a.sites), "p50_ms": round(statistics.median(ms), 3)}
    return out


def gated(answers: Iterator[Answer], th: float) -> Callable[[Task], Answer]:
    """The answers again (in task order), without the suggestions below `th`."""
    def answer(_t: Task) -> Answer:
        a = next(answers)
        # fills off: the server asks the engine nothing, so their time is not spent
        ms = a.ms - a.fill_ms if th > 1.0 else a.ms
        return Answer(at_threshold(a, th), ms, a.analysis_ms)
    return answer


def rows_fill(eng: Any) -> Callable[[list[Any]], list[tuple[str, float]]]:
    """Masked fills decoded together: every request submitted to the engine's step loop (one
    row each, up to its batch), stepped until all are done."""
    from engine.decoding.local import LOCAL_OWNER

    def fill(reqs: list[Any]) -> list[tuple[str, float]]:
        return [x for k in range(0, len(reqs), FILL_ROWS) for x in wave(reqs[k:k + FILL_ROWS])]

    def wave(reqs: list[Any]) -> list[tuple[str, float]]:
        loop = eng.loop()
        done: dict[str, Any] = {}

        def emit(ev: Any, _why: Any) -> None:
            if ev.kind in ("done", "error"):
                done[ev.request_id] = ev

        for r in reqs:
            loop.submit(r, LOCAL_OWNER, emit)
        while len(done) < len(reqs):
            if not loop.step() and len(done) < len(reqs) and not loop.running:
                raise SystemExit("a fill ended without a done event")
        out = []
        for r in reqs:
            ev = done[r.request_id]
            if ev.kind != "done" or ev.stats is None:
                raise SystemExit(f"fill failed: {ev.error}")
            out.append((ev.text, float(ev.stats["min_confidence"])))
        return out
    return fill


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="tiny-code,mini-code")
    ap.add_argument("--quick", action="store_true", help="3 tasks per kind")
    ap.add_argument("--per-kind", type=int, default=40)
    ap.add_argument("--site-tokens", type=int, default=12)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--analysis-lines", type=int, default=5000)
    args = ap.parse_args()
    tasks = make_tasks(3 if args.quick else args.per_kind, args.seed)
    rows, _ = evaluate("textual", tasks, textual)
    a_rows, a_answers = evaluate("server default (fills off: placeholders)", tasks,
                                 lambda t: server_pipeline(t, None, args.site_tokens))
    rows += a_rows
    gates: dict[str, Any] = {"default": gate(tasks, a_answers)}
    from engine.service import TextEngine

    for model in [m for m in args.models.split(",") if m]:
        eng = TextEngine(model, threads=args.threads)
        warm = make_tasks(1, args.seed + 1)  # a first forward pays one-off costs: not timed
        fill = rows_fill(eng)
        for t in warm:
            server_pipeline(t, fill, args.site_tokens)

        def with_fills(t: Task, f: Callable[[list[Any]], list[tuple[str, float]]] = fill) -> Answer:
            return server_pipeline(t, f, args.site_tokens)

        m_rows, m_answers = evaluate(f"model {model} (every fill)", tasks, with_fills)
        rows += m_rows
        gates[model] = g = gate(tasks, m_answers)
        # the default: what the server shows at the gated threshold
        rows += evaluate(f"model {model} @ gate {g['threshold']}", tasks, gated(iter(m_answers), float(g["threshold"])))[0]
    speed = analysis_speed(args.analysis_lines)
    counts = {k: sum(1 for t in tasks if t.key == k) for k in dict.fromkeys(t.key for t in tasks)}
    counts["rename_distractor"] = sum(1 for t in tasks if t.kind == "rename" and t.distractor)
    print(f"next-edit: {len(tasks)} held-out tasks {counts}, site budget {args.site_tokens} tokens")
    print(f"{'system':50} {'kind':30} {'sugg':>5} {'P':>6} {'P 95%':>13} {'R':>6} {'R 95%':>13} {'EM':>6} "
          f"{'FP':>6} {'p50 ms':>8}")
    for r in rows:
        if r["kind"] == "all":
            print(f"{r['system']:50} {'all (latency)':30} {'':>5} {'':>6} {'':>13} {'':>6} {'':>13} {'':>6} {'':>6} "
                  f"{r['p50_ms']:8.1f}  p95 {r['p95_ms']:.1f}")
        elif r["kind"] == "noise":
            print(f"{r['system']:50} {r['kind']:30} {r['suggestions']:5} {'':>6} {'':>13} {'':>6} {'':>13} {'':>6} "
                  f"{r['fp_rate']:6.3f} {r['p50_ms']:8.1f}")
        else:
            print(f"{r['system']:50} {r['kind']:30} {r['suggestions']:5} {r['precision']:6.3f} "
                  f"{str(r['precision_ci']):>13} {r['recall']:6.3f} {str(r['recall_ci']):>13} {r['content_em']:6.3f} "
                  f"{'':>6} {r['p50_ms']:8.1f}")
    for name, g in gates.items():
        print(f"gate {name}: {g}")
    print(f"analysis alone on a {speed['lines']}-line file: {speed}")
    print(json.dumps({"bench": "next_edit", "tasks": counts, "site_tokens": args.site_tokens, "rows": rows,
                      "gates": gates, "analysis_speed": speed}))


if __name__ == "__main__":
    main()
