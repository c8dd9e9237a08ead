"""Cross-file definitions: which names a package's files define, as context chunks (the
fill-in-the-middle examples that teach the embedded model to read such chunks:
`engine.train.crossfile_examples`).

A package is one directory of the corpus. Its files are parsed with Python's `ast` (the
definitions we need are top-level functions, classes, their methods and module constants;
`ast` gives their exact line ranges without a grammar). A name is "cross-file" for a target
file when another file of the package defines it (in at most `MAX_DEFINERS` files, so that
generic names such as `run` or `get` do not count) and the target file binds it nowhere
(no def, class, assignment, argument or loop variable of that name; an import of it does not
count: importing a name is how it crosses files).

Used by `bench/crossfile.py` (held-out target files) and by training
(`engine.train.crossfile_examples.CrossfileStream`: training files only, the context laid out
by the engine's own `PromptBuilder`, so the model sees context exactly where `render_context`
and the builder put it). Nothing at run time imports this module.
"""

from __future__ import annotations

import ast
import builtins
import keyword
import re
import tokenize
import unittest
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath

from engine.api import ContextChunk

MAX_DEFINERS = 3  # a name defined in more of the package's other files is too generic to count
CHUNK_LINES = 8  # lines of a definition chunk at most
CHUNK_CHARS = 360  # characters of a definition chunk at most (~60-90 tokens)
NEAR_ABOVE, NEAR_BELOW = 6, 3  # lines around the cursor's line whose names "are used near it"
MIN_NAME = 3
_IDENT = re.compile(r"\b[A-Za-z_][A-Za-z0-9_]*\b")
_OWNER = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\.$")  # the name before a `.attribute`
_STRING = re.compile(r"(\"\"\"|'''|\"|')(?:\\.|(?!\1).)*\1")
# names never resolved to a package's definition: builtins, keywords, and what unittest's TestCase provides
# (test packages redefine assertEqual and friends here and there; the test file means unittest's)
COMMON = set(dir(builtins)) | set(keyword.kwlist) | set(dir(unittest.TestCase)) | {
    "self", "cls", "super", "__init__", "args", "kwargs"}


@dataclass(frozen=True)
class Definition:
    name: str
    path: str  # the defining file's key (corpus key), shown as the chunk's header
    kind: str  # function, class, method, constant
    text: str  # the chunk: the definition's first lines (a class: its header and method signatures)

    def chunk(self) -> ContextChunk:
        return ContextChunk(display_path(self.path), self.text)


def display_path(key: str) -> str:
    """A corpus key as a workspace-relative path: without the `stdlib/` or `pkg/` label."""
    return key.split("/", 1)[1] if "/" in key else key


def package_of(key: str) -> str:
    return str(PurePosixPath(key).parent)


def _cap(lines: list[str]) -> str:
    out: list[str] = []
    used = 0
    for ln in lines[:CHUNK_LINES]:
        if used + len(ln) + 1 > CHUNK_CHARS and out:
            break
        out.append(ln.rstrip())
        used += len(ln) + 1
    return "\n".join(out)


def _header_end(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> int:
    """The 1-based last line of a def's or class's header (its signature may span lines)."""
    return node.body[0].lineno - 1 if node.body and node.body[0].lineno > node.lineno else node.lineno


def _function_chunk(lines: list[str], node: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    start = min([d.lineno for d in node.decorator_list] + [node.lineno]) - 1
    end = node.end_lineno or node.lineno
    return _cap(lines[start:end])


def _class_chunk(lines: list[str], node: ast.ClassDef) -> str:
    """The class header, its leading assignments and its methods' signatures."""
    out = lines[node.lineno - 1: _header_end(node)]
    for item in node.body:
        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out.extend(lines[item.lineno - 1: _header_end(item)])
        elif isinstance(item, (ast.Assign, ast.AnnAssign)) and item.lineno == (item.end_lineno or item.lineno):
            out.append(lines[item.lineno - 1])
    return _cap(out)


def _method_chunk(lines: list[str], cls: ast.ClassDef, node: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    head = lines[cls.lineno - 1]
    body = lines[node.lineno - 1: (node.end_lineno or node.lineno)]
    return _cap([head, *body])


def definitions(text: str, key: str) -> list[Definition]:
    """The top-level functions, classes, their methods and module constants of one file."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError):
        return []
    lines = text.split("\n")
    out: list[Definition] = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out.append(Definition(node.name, key, "function", _function_chunk(lines, node)))
        elif isinstance(node, ast.ClassDef):
            out.append(Definition(node.name, key, "class", _class_chunk(lines, node)))
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and not item.name.startswith("__"):
                    out.append(Definition(item.name, key, "method", _method_chunk(lines, node, item)))
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                if isinstance(t, ast.Name):
                    end = node.end_lineno or node.lineno
                    out.append(Definition(t.id, key, "constant", _cap(lines[node.lineno - 1: end])))
    return [d for d in out if len(d.name) >= MIN_NAME and d.name not in COMMON and d.text.strip()]


def bound_names(text: str) -> set[str] | None:
    """Every name the file binds other than by import (None when it does not parse)."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError):
        return None
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            out.add(node.id)
        elif isinstance(node, ast.arg):
            out.add(node.arg)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            out.add(node.attr)  # self.x = ...: the file defines attribute x itself
        elif isinstance(node, ast.ExceptHandler) and node.name:
            out.add(node.name)
        elif isinstance(node, ast.Import):  # modules: `time.x` is the module's, not the package's
            out.update(module_names_of(node))
    return out


def module_names_of(node: ast.Import) -> set[str]:
    return {(a.asname or a.name).split(".")[0] for a in node.names}


def module_names(text: str) -> set[str]:
    """The names a file binds to modules by `import x` / `import x.y as z`."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError):
        return set()
    return {n for node in ast.walk(tree) if isinstance(node, ast.Import) for n in module_names_of(node)}


def specific(d: Definition) -> bool:
    """Whether a definition's name is specific enough to resolve by name alone: a method's name
    (reached as `obj.name`, where any object's method of that name may be meant) only when it is
    snake_case of two words or more (`get_running_loop`, not `readline`)."""
    return d.kind != "method" or "_" in d.name.strip("_")


def code_lines(text: str) -> set[int] | None:
    """The 0-based lines that hold code: not inside a multi-line string (docstrings, their
    doctest examples), not blank, not a comment alone (None when the file does not tokenize)."""
    lines = text.split("\n")
    inside: set[int] = set()
    try:
        for tk in tokenize.generate_tokens(iter([ln + "\n" for ln in lines]).__next__):
            if tk.type == tokenize.STRING and tk.end[0] > tk.start[0]:
                inside.update(range(tk.start[0] - 1, tk.end[0]))
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return None
    return {i for i, ln in enumerate(lines) if i not in inside and ln.strip() and not ln.lstrip().startswith("#")}


def names_in(line: str, modules: set[str] | frozenset[str] = frozenset()) -> list[str]:
    """The identifiers of a line of code in order, without string literals and comments, and
    without attributes of `modules` (`F.linear` with `F` in them)."""
    code = _STRING.sub(" ", line).split("#", 1)[0]
    seen: list[str] = []
    for m in _IDENT.finditer(code):
        w = m.group(0)
        owner = _OWNER.search(code, 0, m.start())
        if owner is not None and owner.group(1) in modules:
            continue
        if w not in COMMON and len(w) >= MIN_NAME and w not in seen:
            seen.append(w)
    return seen


class PackageIndex:
    """The definitions of one package's files, by name."""

    def __init__(self, files: Iterable[tuple[str, str]]) -> None:
        self.by_name: dict[str, list[Definition]] = defaultdict(list)
        self.keys: list[str] = []
        for key, text in files:
            self.keys.append(key)
            for d in definitions(text, key):
                self.by_name[d.name].append(d)

    def elsewhere(self, name: str, target: str) -> list[Definition]:
        """The definitions of `name` outside `target`, or [] when there are none or too many files define it."""
        defs = [d for d in self.by_name.get(name, ()) if d.path != target and specific(d)]
        files = {d.path for d in defs}
        return defs if 0 < len(files) <= MAX_DEFINERS else []

    def cross_names(self, line: str, target: str, bound: set[str], modules: set[str] | frozenset[str] = frozenset()
                    ) -> list[str]:
        """The names of `line` that another file of the package defines and the target binds
        nowhere (attributes of the target's imported `modules` excluded)."""
        return [w for w in names_in(line, modules) if w not in bound and self.elsewhere(w, target)]

    def context_for(self, names: Sequence[str], target: str, limit: int = 6) -> list[ContextChunk]:
        """Definition chunks of `names` (first definition of each, in order), deduplicated."""
        out: list[ContextChunk] = []
        for w in names:
            defs = self.elsewhere(w, target)
            if not defs:
                continue
            c = defs[0].chunk()
            if c not in out:
                out.append(c)
            if len(out) >= limit:
                break
        return out


def near_lines(lines: list[str], i: int) -> list[str]:
    """The lines around line `i` (not `i` itself), nearest first: what a context gatherer sees
    around the cursor before the line is written."""
    out: list[str] = []
    for d in range(1, max(NEAR_ABOVE, NEAR_BELOW) + 1):
        if d <= NEAR_ABOVE and i - d >= 0:
            out.append(lines[i - d])
        if d <= NEAR_BELOW and i + d < len(lines):
            out.append(lines[i + d])
    return out


def near_names(index: PackageIndex, lines: list[str], i: int, target: str, bound: set[str],
               modules: set[str] | frozenset[str] = frozenset()) -> list[str]:
    out: list[str] = []
    for ln in near_lines(lines, i):
        for w in index.cross_names(ln, target, bound, modules):
            if w not in out:
                out.append(w)
    return out


def packages(keys: Iterable[str]) -> dict[str, list[str]]:
    """Packages (directories with an `__init__.py`) with at least two files, and their files' keys.
    The standard library's top level is no package: its modules share no names on purpose."""
    by: dict[str, list[str]] = defaultdict(list)
    for k in keys:
        by[package_of(k)].append(k)
    return {p: sorted(ks) for p, ks in by.items() if len(ks) >= 2 and f"{p}/__init__.py" in ks}
