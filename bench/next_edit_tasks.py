"""Tasks of `bench/next_edit.py` from the held-out standard-library files of
`engine/train/heldout.txt` (never training files), one edit each, with its true follow-ups:
`rename` (sites from an oracle independent of the analysis: CPython's `symtable`),
`param_added` / `param_removed` / `param_reordered` (a module-level function's calls) and
`noise` (no follow-up). The written-source kinds come from `bench.next_edit_written`.
"""

from __future__ import annotations

import random
import re
import symtable
from dataclasses import dataclass
from typing import Any

import tree_sitter_python
from tree_sitter import Language, Node, Parser

from bench.next_edit_written import apply, spans, text_of, walk, written_tasks
from bench.tasks import parses
from engine.train.corpus import heldout_files, read_text

PY = Language(tree_sitter_python.language())
PARSER = Parser(PY)
KINDS = ("rename", "param_added", "param_removed", "param_reordered", "field_added", "return_added", "noise")
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
            old = apply(text, [(a, b, o) for a, b, o, _ in edits])
            new = apply(text, [(a, b, o) if a != plist.start_byte else (a, b, n) for a, b, o, n in edits])
            truth_after = [n for a, _b, _o, n in edits if a != plist.start_byte]
            spans = _spans([(a, b, o) if a != plist.start_byte else (a, b, n) for a, b, o, n in edits],
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
        new = apply(text, [(plist.start_byte, plist.end_byte, "(" + ", ".join(new_names) + ")")])
        moves = [(plist.start_byte, plist.end_byte, "(" + ", ".join(new_names) + ")")] + \
            [(c.start_byte, c.end_byte, text_of(c)) for c in calls]
        spans = _spans(moves, plist.start_byte)
        truth = [Truth(s, e, _args_text(c, want[c.id])) for (s, e), c in zip(spans, calls, strict=True)]
        return Task(kind, key, text, new, text.count("\n", 0, plist.start_byte), truth, fname=fname,
                    param=names[i], index=i)
    return None


def _spans(edits: list[tuple[int, int, str]], skip: int) -> list[tuple[int, int]]:
    """Where each edit's text lies once all are applied (the def's edit at `skip` left out)."""
    return [sp for sp, e in zip(spans(edits), sorted(edits), strict=True) if e[0] != skip]


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
        if kind in ("field_added", "return_added"):
            continue  # no held-out stdlib file has them: written sources (bench.next_edit_written)
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

