"""Infill tasks cut by tree-sitter from held-out source files, and their quality metrics.

Kinds: `single_line` (the rest of a line from its first code character), `multi_line`
(two to four whole lines), `block` (the body of a function, class or compound statement,
from its first statement). Held-out files are those of `engine/train/heldout.txt` that are
part of the standard library, so every machine has them. Deterministic from a seed.
"""

from __future__ import annotations

import difflib
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import tree_sitter_python
from tree_sitter import Language, Node, Parser

from engine.api import Plan
from engine.train.corpus import heldout_files, read_text

T = TypeVar("T")

PY = Language(tree_sitter_python.language())
KINDS = ("single_line", "multi_line", "block")
BODY_PARENTS = {"function_definition", "class_definition", "if_statement", "for_statement",
                "while_statement", "with_statement", "try_statement"}


@dataclass(frozen=True)
class Task:
    kind: str
    source: str
    prefix: str
    middle: str
    suffix: str
    plan: Plan


def _indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip(" \t"))]


def _has_error(node: Node) -> bool:
    return node.has_error


def parses(text: str) -> bool:
    return not Parser(PY).parse(text.encode("utf-8")).root_node.has_error


def _single(text: str, rng: random.Random) -> tuple[str, str, str, Plan] | None:
    lines = text.split("\n")
    cands = [i for i, ln in enumerate(lines) if len(ln.strip()) >= 8 and not ln.strip().startswith(("#", '"', "'"))]
    if not cands:
        return None
    i = rng.choice(cands)
    start = sum(len(ln) + 1 for ln in lines[:i]) + len(_indent(lines[i]))
    end = start + len(lines[i].strip())
    return text[:start], text[start:end], text[end:], Plan(max_tokens=48, stop="line")


def _multi(text: str, rng: random.Random) -> tuple[str, str, str, Plan] | None:
    lines = text.split("\n")
    n = rng.randint(2, 4)
    cands = [i for i in range(len(lines) - n)
             if lines[i].strip() and all(ln.strip() and len(_indent(ln)) >= len(_indent(lines[i]))
                                         for ln in lines[i:i + n])
             and not lines[i].strip().startswith(("#", '"', "'", "@"))]
    if not cands:
        return None
    i = rng.choice(cands)
    start = sum(len(ln) + 1 for ln in lines[:i]) + len(_indent(lines[i]))
    end = sum(len(ln) + 1 for ln in lines[: i + n]) - 1
    return text[:start], text[start:end], text[end:], Plan(max_tokens=96, stop="dedent", indent=_indent(lines[i]))


def _block(text: str, rng: random.Random) -> tuple[str, str, str, Plan] | None:
    root = Parser(PY).parse(text.encode("utf-8")).root_node
    blocks: list[Node] = []
    stack = [root]
    while stack:
        n = stack.pop()
        if n.type == "block" and n.parent is not None and n.parent.type in BODY_PARENTS \
                and 20 <= n.end_byte - n.start_byte <= 300 and n.start_point[0] > n.parent.start_point[0]:
            blocks.append(n)
        stack.extend(n.children)
    if not blocks:
        return None
    b = rng.choice(sorted(blocks, key=lambda n: n.start_byte))
    raw = text.encode("utf-8")
    start = len(raw[: b.start_byte].decode("utf-8"))
    end = len(raw[: b.end_byte].decode("utf-8"))
    line_start = text.rfind("\n", 0, start) + 1
    indent = text[line_start:start]
    return text[:start], text[start:end], text[end:], Plan(max_tokens=128, stop="dedent", indent=indent)


CUTTERS = {"single_line": _single, "multi_line": _multi, "block": _block}


def make_tasks(per_kind: int, seed: int = 0, max_file_chars: int = 60_000) -> list[Task]:
    files = sorted((f for f in heldout_files() if f.key.startswith("stdlib/")), key=lambda f: f.key)
    texts = [(f.key, t) for f in files if (t := read_text(f)) and len(t) <= max_file_chars and parses(t)]
    rng = random.Random(seed)

    def draw(kind: str) -> Task | None:
        key, text = rng.choice(texts)
        cut = CUTTERS[kind](text, rng)
        return None if cut is None else Task(kind, key, *cut)

    return per_kind_draws(KINDS, per_kind, per_kind * 50, draw)


def per_kind_draws(kinds: Sequence[str], per_kind: int, max_tries: int,
                   draw: Callable[[str], T | None]) -> list[T]:
    """For each kind in turn, the first `per_kind` results of `draw(kind)` that are not None,
    drawing at most `max_tries` times a kind (a seeded `draw` makes the list reproducible)."""
    out: list[T] = []
    for kind in kinds:
        got, tries = 0, 0
        while got < per_kind and tries < max_tries:
            tries += 1
            item = draw(kind)
            if item is not None:
                out.append(item)
                got += 1
    return out


def norm_lines(s: str) -> list[str]:
    return [ln.strip() for ln in s.strip().split("\n") if ln.strip()]


def exact_match(pred: str, gold: str) -> bool:
    return norm_lines(pred) == norm_lines(gold)


def edit_similarity(pred: str, gold: str) -> float:
    return difflib.SequenceMatcher(None, pred.strip(), gold.strip()).ratio()
