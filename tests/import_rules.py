"""The project's import rules, checked on the source with `ast` (no module is imported).

Every `import` and `from ... import` of every module of the scanned packages becomes an edge
`importer -> target` (relative imports resolved; `from pkg import name` points at `pkg.name`
when that is a module). An edge is *lazy* inside a function body and *type-only* under
`if TYPE_CHECKING:`. Modules are named by dotted-name patterns, so the rules keep holding
when modules are regrouped: `engine.scheduler` matches that module and its submodules,
`*` one name segment, `**` any number of them (none included): `engine.**.scheduler`
matches `engine.scheduler` and `engine.decoding.scheduler`.

`check(root, rules)` returns the violations, each a readable line. `cycles(graph, prefix)`
lists the import cycles among the modules under `prefix`; `part_graph(graph, parts)` collapses
the graph to parts of the tree (`engine.*`: each direct child of `engine`; the server's groups
alike), so that a cycle between two parts shows whichever modules close it. Cycles count every import, type-only ones
too: an annotation that names the importer still ties the two modules together.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from functools import cache
from itertools import pairwise
from pathlib import Path


@dataclass(frozen=True)
class Edge:
    importer: str
    target: str
    line: int
    lazy: bool = False  # inside a function: runs only when it is called
    type_only: bool = False  # under `if TYPE_CHECKING:`: never runs


Graph = dict[str, list[Edge]]  # module -> its imports


# -- patterns --------------------------------------------------------------------------------
@cache
def _regex(pattern: str) -> re.Pattern[str]:
    out = ""
    for seg in pattern.split("."):
        out += r"(?:[^.]+\.)*" if seg == "**" else re.escape(seg).replace(r"\*", "[^.]*") + r"\."
    return re.compile(out + r".*$" if pattern.endswith("**") else out[:-2] + r"(?:\..+)?$")


def matches(name: str, patterns: Iterable[str]) -> bool:
    """Whether module `name` is, or lies inside, a module that one of `patterns` names."""
    return any(_regex(p).match(name) for p in patterns)


# -- scanning --------------------------------------------------------------------------------
def modules(root: Path, packages: Sequence[str]) -> dict[str, Path]:
    """Dotted name -> file of every module of `packages` under `root`."""
    found: dict[str, Path] = {}
    for pkg in packages:
        for path in sorted((root / pkg).rglob("*.py")):
            rel = path.relative_to(root).with_suffix("")
            parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
            found[".".join(parts)] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _base(module: str, is_package: bool, level: int, name: str | None) -> str:
    if level == 0:
        return name or ""
    parts = module.split(".")
    keep = len(parts) - level + (1 if is_package else 0)
    return ".".join([*parts[:keep], *([name] if name else [])])


def _edges(module: str, path: Path, known: set[str]) -> list[Edge]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    is_package = path.name == "__init__.py"
    out: list[Edge] = []

    def visit(node: ast.AST, lazy: bool, type_only: bool) -> None:
        if isinstance(node, ast.Import):
            out.extend(Edge(module, a.name, node.lineno, lazy, type_only) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _base(module, is_package, node.level, node.module)
            for a in node.names:
                sub = f"{base}.{a.name}"
                out.append(Edge(module, sub if sub in known else base, node.lineno, lazy, type_only))
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            for stmt in node.body:
                visit(stmt, lazy, True)
            for stmt in node.orelse:
                visit(stmt, lazy, type_only)
            return
        inner = lazy or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        for child in ast.iter_child_nodes(node):
            visit(child, inner, type_only)

    visit(tree, False, False)
    return out


def scan(root: Path, packages: Sequence[str]) -> Graph:
    mods = modules(root, packages)
    known = set(mods)
    return {name: _edges(name, path, known) for name, path in mods.items()}


# -- graph questions -------------------------------------------------------------------------
def _parents(name: str) -> list[str]:
    """`a.b.c` -> [`a`, `a.b`]: importing a module runs its packages' `__init__` first."""
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def load_time(graph: Graph, module: str) -> list[str]:
    """The modules that importing `module` runs (module-level imports, parents included)."""
    return [t for e in graph.get(module, []) if not e.lazy and not e.type_only
            for t in (*_parents(e.target), e.target)]


def heavy_modules(graph: Graph, heavy: Sequence[str]) -> dict[str, list[str]]:
    """Module -> an import chain to a `heavy` module run when it is imported (only those
    that have one)."""
    chains: dict[str, list[str] | None] = {}

    def chain(m: str, visiting: frozenset[str]) -> list[str] | None:
        if matches(m, heavy):
            return [m]
        if m in chains:
            return chains[m]
        if m in visiting or m not in graph:
            return None
        found = None
        for t in (*_parents(m), *load_time(graph, m)):
            sub = chain(t, visiting | {m})
            if sub is not None:
                found = [m, *sub]
                break
        chains[m] = found
        return found

    return {m: c for m in graph if (c := chain(m, frozenset())) is not None}


def reachable(graph: Graph, roots: Iterable[str]) -> dict[str, list[str]]:
    """Module -> an import chain from a root to it, following every import that can run
    (lazy ones included, type-only ones not)."""
    paths = {r: [r] for r in roots if r in graph}
    todo = list(paths)
    while todo:
        m = todo.pop()
        for e in graph.get(m, []):
            if e.type_only:
                continue
            for t in (*_parents(e.target), e.target):
                if t not in paths:
                    paths[t] = [*paths[m], t]
                    if t in graph:
                        todo.append(t)
    return paths


def cycles(graph: Graph, prefix: str) -> list[list[str]]:
    """The import cycles among the modules under `prefix` (every import counts, type-only
    and lazy ones too), each as a closed chain `[a, b, ..., a]`."""
    inside = {m for m in graph if matches(m, [prefix])}
    succ = {m: sorted({e.target for e in graph[m] if e.target in inside and e.target != m})
            for m in inside}
    found: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the stack, 2: done
    stack: list[str] = []

    def dfs(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for t in succ[m]:
            if state.get(t) == 1:
                found.append([*stack[stack.index(t):], t])
            elif t not in state:
                dfs(t)
        stack.pop()
        state[m] = 2

    for m in sorted(inside):
        if m not in state:
            dfs(m)
    return found


def part_of(name: str, parts: Sequence[str]) -> str | None:
    """The part of the tree module `name` lies in: the first of `parts` that matches it, cut
    to that pattern's length (`engine.*` makes `engine.decoding.stream` `engine.decoding`)."""
    for p in parts:
        if matches(name, [p]):
            return ".".join(name.split(".")[:len(p.split("."))])
    return None


def part_graph(graph: Graph, parts: Sequence[str]) -> Graph:
    """The imports between `parts`: part -> the edges of its modules into another part, each
    edge keeping its importing module and line, its target replaced by the target's part."""
    out: Graph = {}
    for m, edges in graph.items():
        a = part_of(m, parts)
        if a is None:
            continue
        mine = out.setdefault(a, [])
        for e in edges:
            b = part_of(e.target, parts)
            if b is not None and b != a:
                mine.append(replace(e, target=b))
    return out


def _hops(graph: Graph, cycle: list[str]) -> str:
    """`a -> b -> a` with, for each hop, the first import that makes it."""
    out = [cycle[0]]
    for a, b in pairwise(cycle):
        e = next(e for e in graph[a] if e.target == b)
        kind = " type-only" if e.type_only else " lazy" if e.lazy else ""
        out.append(f"({e.importer}:{e.line}{kind}) -> {b}")
    return " ".join(out)


# -- the rules -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Rules:
    """The project's rules, by module-name patterns (see the module docstring)."""

    engine: tuple[str, ...] = ("engine",)
    server: tuple[str, ...] = ("llada_lsp",)
    kernels: tuple[str, ...] = ("kernels",)
    heavy: tuple[str, ...] = ("torch", "transformers", "triton")
    # the server's one way to torch: its in-process engine client, lazily
    torch_gate: tuple[str, ...] = ("llada_lsp.engine_client", "llada_lsp.**.engine_client",
                                   "llada_lsp.**.inprocess*")
    policies: tuple[str, ...] = ("engine.**.policies",)
    # the daemon package, and the step loop it runs (engine.decoding.scheduler, its jobs)
    daemon: tuple[str, ...] = ("engine.**.daemon", "engine.**.scheduler", "engine.**.jobs",
                               "engine.**.server", "engine.**.connection", "engine.**.cli")
    training: tuple[str, ...] = ("engine.**.train",)
    # parts of the tree that import one way: no cycle between them, type-only imports counted.
    # The server's groups are its packages (llada_lsp.text, .engines, ...); each top-level
    # module is one of its own: a command, or the options (`llada_lsp.options`, the floor that
    # every group reads), with no exception.
    parts: tuple[str, ...] = ("engine.*", "kernels", "llada_lsp.*")
    # packages whose own modules import no cycle, type-only imports counted: within a part
    # (a group) too, so a cycle of two files of one group is reported
    acyclic: tuple[str, ...] = ("llada_lsp", "kernels", "engine")
    packages: tuple[str, ...] = field(default=("engine", "llada_lsp", "kernels"))


def _line(e: Edge, why: str) -> str:
    return f"{e.importer}:{e.line} imports {e.target}: {why}"


def check(root: Path, rules: Rules = Rules()) -> list[str]:
    """Every violation of `rules` by the packages under `root`."""
    graph = scan(root, rules.packages)
    heavy = heavy_modules(graph, rules.heavy)
    bad: list[str] = []
    for m, edges in sorted(graph.items()):
        for e in edges:
            if matches(m, rules.engine) and matches(e.target, rules.server):
                bad.append(_line(e, "the engine never imports the server"))
            if matches(m, rules.kernels) and matches(e.target, (*rules.engine, *rules.server)):
                bad.append(_line(e, "kernels import neither the engine nor the server"))
            if matches(m, rules.policies) and matches(e.target, rules.daemon):
                bad.append(_line(e, "a policy never imports the scheduler or the daemon"))
            if matches(m, rules.server) and not e.type_only and not matches(e.target, rules.server) \
                    and (matches(e.target, rules.heavy) or e.target in heavy):  # a way out to torch
                via = " -> ".join(heavy.get(e.target, [e.target]))
                if not matches(m, rules.torch_gate):
                    bad.append(_line(e, f"the server reaches torch ({via}) only through its "
                                        "in-process engine client"))
                elif not e.lazy:
                    bad.append(_line(e, f"the in-process engine client imports torch ({via}) "
                                        "only inside functions"))
    parts = part_graph(graph, rules.parts)
    for c in cycles(parts, "**"):
        bad.append(f"import cycle between parts: {_hops(parts, c)}: parts import one way "
                   "(type-only imports count)")
    for pkg in rules.acyclic:
        for c in cycles(graph, pkg):
            bad.append(f"import cycle: {_hops(graph, c)}: modules of {pkg} import one way "
                       "(type-only imports count)")
    roots = [m for m in graph if matches(m, (*rules.server, *rules.daemon))]
    for m, path in sorted(reachable(graph, roots).items()):
        if matches(m, rules.training) and not matches(m.rpartition(".")[0], rules.training):
            bad.append(f"{path[0]} runs {m} ({' -> '.join(path)}): nothing the server or the "
                       "daemon runs imports the training code")
    return bad
