"""The names bench's tasks (bench/names.py): the cursor inside an identifier at a use or at a
first binding, from held-out files (engine/train/heldout.txt) that parse, deterministic from
the seed.

The cursor sits inside an identifier (1..len-1 of its characters typed, the rest of the line
removed, stop rule "line"), at a use (`ast.Name` or attribute load) of a name that is
- `same_file`: bound in the file itself (a definition, parameter, assignment),
- `imported`: bound by an import of the file, and defined outside its package,
- `package`: defined in another file of the package (engine.train.crossfile.PackageIndex:
  imported from it, or reached as an attribute of one of its modules);
or, as a control, `definition`: the cursor inside a name at its first binding (def, class,
parameter, assignment target: new names). At most `PER_FILE` tasks of a kind come from one
file. The other control, `ordinary`, is bench/tasks.py's single_line tasks (bench/names.py).
"""

from __future__ import annotations

import ast
import random
import re
from dataclasses import dataclass
from pathlib import Path

from bench.tasks import Task
from engine.api import Plan
from engine.train.corpus import SourceFile, all_files, heldout_files, read_text
from engine.train.crossfile import PackageIndex, bound_names, code_lines, package_of, packages

USE_KINDS = ("same_file", "imported", "package")
KINDS = (*USE_KINDS, "definition", "ordinary")
PER_FILE = 2  # tasks of a kind per file at most


@dataclass(frozen=True)
class NameTask:
    task: Task
    name: str  # the identifier the cursor is inside
    typed: str
    path: Path


def _uses_and_defs(tree: ast.AST) -> tuple[list[tuple[int, int, str]], list[tuple[int, int, str]]]:
    """(line, column, name) of name loads and attribute loads, and of first bindings."""
    uses, defs, seen = [], [], set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            uses.append((node.lineno - 1, node.col_offset, node.id))
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load) and node.end_col_offset is not None \
                and node.end_lineno == node.lineno:
            uses.append((node.lineno - 1, node.end_col_offset - len(node.attr), node.attr))
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) and node.id not in seen:
            seen.add(node.id)
            defs.append((node.lineno - 1, node.col_offset, node.id))
        elif isinstance(node, ast.arg) and node.arg not in ("self", "cls"):
            defs.append((node.lineno - 1, node.col_offset, node.arg))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defs.append((node.lineno - 1, -1, node.name))  # column found on the line
    return uses, defs


def _imported(tree: ast.AST) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            out.update(a.asname or a.name for a in node.names)
        elif isinstance(node, ast.Import):
            out.update((a.asname or a.name).split(".")[0] for a in node.names)
    return out


def _task(kind: str, f: SourceFile, text: str, lines: list[str], i: int, col: int, name: str,
          rng: random.Random) -> NameTask | None:
    ln = lines[i]
    if col < 0:
        m = re.search(rf"\b(?:def|class)\s+({re.escape(name)})\b", ln)
        if m is None:
            return None
        col = m.start(1)
    if len(name) < 3 or not ln.isascii() or ln[col: col + len(name)] != name:
        return None
    k = rng.randint(1, len(name) - 1)
    start = sum(len(x) + 1 for x in lines[:i])
    cur = start + col + k
    end = start + len(ln.rstrip())
    if end <= cur:
        return None
    t = Task(kind, f.key, text[:cur], text[cur:end], text[end:], Plan(max_tokens=48, stop="line"))
    return NameTask(t, name, name[:k], f.path)


def make_name_tasks(per_kind: int, seed: int = 0, max_chars: int = 60_000) -> dict[str, list[NameTask]]:
    files = {f.key: f for f in all_files()}
    pkgs = packages(files)
    rng = random.Random(seed)
    per: dict[str, list[list[NameTask]]] = {k: [] for k in KINDS[:-1]}
    indexes: dict[str, PackageIndex] = {}
    for f in sorted(heldout_files(), key=lambda f: f.key):
        text = read_text(f)
        if not text or len(text) > max_chars or f.key not in files:
            continue
        try:
            tree = ast.parse(text)
        except (SyntaxError, ValueError, RecursionError):
            continue
        bound, code = bound_names(text), code_lines(text)
        if bound is None or code is None:
            continue
        pkg = package_of(f.key)
        cross: PackageIndex | None = None
        if pkg in pkgs and not f.key.startswith("stdlib/"):
            if pkg not in indexes:
                indexes[pkg] = PackageIndex((k, src) for k in pkgs[pkg] if (src := read_text(files[k])) is not None)
            cross = indexes[pkg]
        imported = _imported(tree)
        lines = text.split("\n")
        uses, defs = _uses_and_defs(tree)
        found: dict[str, list[NameTask]] = {k: [] for k in per}
        for i, col, name in uses:
            if i not in code:
                continue
            if cross is not None and cross.elsewhere(name, f.key) and name not in bound:
                kind = "package"
            elif name in imported:
                kind = "imported"
            elif name in bound:
                kind = "same_file"
            else:
                continue
            t = _task(kind, f, text, lines, i, col, name, rng)
            if t is not None:
                found[kind].append(t)
        for i, col, name in defs:
            if i in code and (t := _task("definition", f, text, lines, i, col, name, rng)) is not None:
                found["definition"].append(t)
        for kind, ts in found.items():
            if ts:
                rng.shuffle(ts)
                per[kind].append(ts[:PER_FILE])
    out: dict[str, list[NameTask]] = {}
    for kind, lists in per.items():
        rng.shuffle(lists)
        flat: list[NameTask] = []
        for k in range(PER_FILE):
            flat += [ts[k] for ts in lists if len(ts) > k]
        out[kind] = flat[:per_kind]
    return out
