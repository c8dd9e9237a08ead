"""The docs name only what exists (issue 45): every file path of this tree and every relative
link of docs/*.md and README.md exists; docs/architecture.md (a request's life, told by module
and symbol) is held to every file path (`llada_lsp/lsp/server.py`,
`engine/decoding/`), every bare file name (`stdio.py`), every relative link and every code
symbol in backticks that docs/*.md and README.md name resolves in this tree. Symbols resolve by
`ast` (nothing is imported, torch included): `module.name`, `package.module.Class.method`,
`Class.member` (methods, class attributes and fields, `self.x` set in a method), and a bare
`CamelCase` or `snake_case` name must be defined (or be a string the code uses: a wire field, an
option). Then the checker on a doc that names what does not exist, so that it cannot pass
silently."""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("llada_lsp", "engine", "kernels", "bench")
TOP_DIRS = ("llada_lsp", "engine", "kernels", "bench", "tests", "editors", "docs")
# names of other projects the docs use as they are (each looked up where it is defined)
EXTERNAL = {
    "InlineCompletionList", "InlineCompletionItem", "selectedCompletionInfo",  # LSP 3.18
    "call_soon_threadsafe", "loop.call_soon_threadsafe",  # asyncio
    "tree.edit", "Tree.edit",  # tree-sitter
    "from_pretrained", "trust_remote_code", "safetensors",  # transformers
    "CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS", "TRITON_INTERPRET",  # environment of others
}


# paths of other repositories that the docs cite as theirs
EXTERNAL_PATHS = {"tests/test_bd.py"}  # inclusionAI/dInfer's (docs/models.md)


def docs(root: Path) -> list[Path]:
    return [*sorted((root / "docs").glob("*.md")), root / "README.md"]


# -- the tree's names -----------------------------------------------------------------------
@dataclass
class Index:
    modules: dict[str, Path] = field(default_factory=dict)  # dotted -> file
    defs: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))  # module -> names
    members: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))  # class -> names
    classes_of: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))  # module -> classes
    words: set[str] = field(default_factory=set)  # every identifier and identifier-like string
    basenames: set[str] = field(default_factory=set)  # file names of the tree

    def module(self, dotted: str) -> bool:
        return dotted in self.modules

    def short_modules(self, name: str) -> list[str]:
        return [m for m in self.modules if m.rsplit(".", 1)[-1] == name]


WORD = re.compile(r"[A-Za-z_][\w]*")


def _members(cls: ast.ClassDef) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(cls):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out.add(node.target.id)
        elif isinstance(node, ast.Assign):
            out.update(t.id for t in node.targets if isinstance(t, ast.Name))
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            out.update(t.attr for t in targets if isinstance(t, ast.Attribute)
                       and isinstance(t.value, ast.Name) and t.value.id == "self")
    return out


@cache
def index(root: Path) -> Index:
    ix = Index()
    for pkg in PACKAGES:
        for path in sorted((root / pkg).rglob("*.py")):
            rel = path.relative_to(root).with_suffix("")
            parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
            ix.modules[".".join(parts)] = path
    for top in TOP_DIRS:
        ix.basenames.update(p.name for p in (root / top).rglob("*") if p.is_file())
    ix.basenames.update(p.name for p in root.iterdir() if p.is_file())
    for name, path in ix.modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                ix.defs[name].add(node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                ix.defs[name].update(t.id for t in targets if isinstance(t, ast.Name))
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                ix.defs[name].update((a.asname or a.name).split(".")[0] for a in node.names)
            if isinstance(node, ast.ClassDef):
                ix.members[node.name] |= _members(node)
                ix.classes_of[name].add(node.name)
        for node in ast.walk(tree):
            if isinstance(node, ast.Name):
                ix.words.add(node.id)
            elif isinstance(node, ast.Attribute):
                ix.words.add(node.attr)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                ix.words.add(node.name)
            elif isinstance(node, ast.arg):
                ix.words.add(node.arg)
            elif isinstance(node, ast.keyword) and node.arg:
                ix.words.add(node.arg)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and len(node.value) < 80:
                ix.words.update(WORD.findall(node.value))
    return ix


# -- resolving what a doc names ---------------------------------------------------------------
def _attrs(ix: Index, owner: str, rest: list[str], module: str | None) -> bool:
    """`rest` resolves from `owner`, a class name (module None) or a module."""
    if not rest:
        return True
    head, tail = rest[0], rest[1:]
    if module is not None:
        if head not in ix.defs[module]:
            return False
        if not tail:
            return True
        if head in ix.classes_of[module]:
            return _attrs(ix, head, tail, None)
        return len(tail) == 1 and tail[0] in ix.words  # a field of a module-level object
    return head in ix.members[owner] and (not tail or tail[0] in ix.words)


def resolves(ix: Index, dotted: str) -> bool:
    parts = dotted.split(".")
    # a full module path, then attributes
    for cut in range(len(parts), 0, -1):
        mod = ".".join(parts[:cut])
        if ix.module(mod):
            return _attrs(ix, mod, parts[cut:], mod)
    if parts[0] in PACKAGES:
        return False
    # a module named by its last segment (`stdio.serve_stdio`), or a class (`Scheduler.run`)
    if any(_attrs(ix, m, parts[1:], m) for m in ix.short_modules(parts[0])):
        return True
    return parts[0] in ix.members and _attrs(ix, parts[0], parts[1:], None)


SPAN = re.compile(r"`([^`\n]+)`")
SYMBOL = re.compile(r"^[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*(?:\(\))?$")
PATH = re.compile(rf"(?<![\w/.-])((?:{'|'.join(TOP_DIRS)})/[\w./*-]*[\w/*])")
PYFILE = re.compile(r"(?<![\w/.-])([\w-]+\.(?:py|lua|ts|sh|json|toml))\b")
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def wrong_names(doc: Path, root: Path, symbols: bool = True) -> list[str]:
    """What `doc` names that this tree lacks, one line each; `symbols=False`: its paths of this
    tree and its links only."""
    ix = index(root)
    text = doc.read_text(encoding="utf-8")
    bad: list[str] = []

    def where(pos: int) -> str:
        return f"{doc.name}:{text.count(chr(10), 0, pos) + 1}"

    for m in PATH.finditer(text):
        p = m[1].rstrip(".")
        if p in EXTERNAL_PATHS:
            continue
        hit = any(root.glob(p)) if "*" in p else (root / p).exists()
        if not hit:
            bad.append(f"{where(m.start())}: path {p} does not exist")
    for m in LINK.finditer(text):
        target = m[1]
        if "://" not in target and not (doc.parent / target).exists():
            bad.append(f"{where(m.start())}: link {target} does not exist")
    if not symbols:
        return bad
    for m in PYFILE.finditer(text):
        if m[1] not in ix.basenames and m[1] not in {"pyproject.toml", "package.json", "init.lua"}:
            bad.append(f"{where(m.start())}: no file is called {m[1]}")
    for m in SPAN.finditer(text):
        span = m[1].strip()
        if not SYMBOL.match(span) or span in EXTERNAL:
            continue
        name = span.removesuffix("()")
        if "." in name:
            if name.split(".")[-1] in {"py", "md", "json", "lua", "ts", "toml", "sh", "txt"}:
                continue  # a file name: checked above
            if not resolves(ix, name):
                bad.append(f"{where(m.start())}: `{span}` does not resolve")
        elif ("_" in name.strip("_") or re.search(r"[a-z][A-Z]|^[A-Z][a-z]", name)) \
                and name not in ix.words:
            bad.append(f"{where(m.start())}: `{span}` is named nowhere in the code")
    return bad


def test_the_architecture_names_only_what_exists() -> None:
    assert wrong_names(ROOT / "docs" / "architecture.md", ROOT) == []


@pytest.mark.parametrize("doc", docs(ROOT), ids=lambda p: p.name)
def test_the_docs_paths_and_links_exist(doc: Path) -> None:
    """The other docs name options (`nextEdit.enabled`), LSP fields and the upstream models'
    files as well: their paths of this tree and their links are checked."""
    assert wrong_names(doc, ROOT, symbols=False) == []


def test_the_checker_finds_wrong_names(tmp_path: Path) -> None:
    doc = tmp_path / "docs" / "wrong.md"
    doc.parent.mkdir()
    doc.write_text(
        "The handler (`llada_lsp/no_such_module.py`, `engine/decoding/`) calls\n"
        "`CompletionService.no_such_method`, `engine.api.NoSuchThing`, `NoSuchClass`,\n"
        "`engine.decoding.no_such_module.run`, `no_such_helper` and `nosuchmodule.Plan`;\n"
        "the diagram cites `model.py`, see [there](missing.md).\n"
        "These exist: `engine.api.Plan`, `Plan.preset`, `engine/api.py`, `api.Plan`, `api.py`,\n"
        "and `CompletionRequest`.\n", encoding="utf-8")
    # a real tree's names: this checkout's, read from a copy of the doc outside it
    found = wrong_names(doc, ROOT)
    text = "\n".join(found)
    for wrong in ("path llada_lsp/no_such_module.py", "`CompletionService.no_such_method`",
                  "`engine.api.NoSuchThing`", "`NoSuchClass`", "`engine.decoding.no_such_module.run`",
                  "`no_such_helper`", "`nosuchmodule.Plan`", "no file is called model.py",
                  "link missing.md"):
        assert wrong in text, (wrong, text)
    assert len(found) == 9, text
