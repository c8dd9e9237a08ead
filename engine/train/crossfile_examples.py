"""Cross-file training examples: fill-in-the-middle rows whose workspace context holds the
definitions, from other files of the package, of the names the middle uses.

The packages, their definitions and the names that cross files are `engine.train.crossfile`'s;
this module draws the examples from them (`CrossfileStream`, the trainer's `--crossfile`
share of each batch): training files only, the prompt laid out by the engine's own
`PromptBuilder` with the context, so the model sees context exactly where the engine puts it.
Nothing at run time imports this module.
"""

from __future__ import annotations

import random

from engine.api import ContextChunk
from engine.train.crossfile import (
    PackageIndex,
    bound_names,
    code_lines,
    display_path,
    module_names,
    near_names,
    package_of,
    packages,
)

CROSS_LINE_SHARE = 0.7  # examples whose middle starts at a line using a cross-file name
NO_CONTEXT_SHARE = 0.15  # examples with no context at all (the engine's default without a gatherer)
MAX_DISTRACTORS = 2


class CrossfileStream:
    """Endless, seeded fill-in-the-middle examples with workspace context, from the training
    files of multi-file packages: the middle is (mostly) a line or a few lines that use a name
    defined in another file of the package; the context holds the definitions of the names used
    in and near the middle plus unrelated chunks (other files' definitions), shuffled, sometimes
    none. The prompt is the engine's own (`PromptBuilder.layout` with the context), then the
    middle and its end-of-middle padding, as `engine.train.data.encode_example` lays it out."""

    def __init__(self, files: dict[str, str], builder, block: int, seed: int, max_middle: int = 96) -> None:  # noqa: ANN001
        from engine.train.data import cut_example  # training-only

        self._cut = cut_example
        self.files = files
        self.pkgs = packages(files)
        self.targets = [k for ks in self.pkgs.values() for k in ks]
        if not self.targets:
            raise ValueError("no multi-file package among the files")
        self.builder, self.block, self.max_middle = builder, block, max_middle
        self.rng = random.Random(seed)
        self.sp = builder.sp
        self._index: dict[str, PackageIndex] = {}
        self._bound: dict[str, set[str] | None] = {}
        self._code: dict[str, list[int]] = {}
        self._modules: dict[str, set[str]] = {}

    def index(self, pkg: str) -> PackageIndex:
        if pkg not in self._index:
            self._index[pkg] = PackageIndex((k, self.files[k]) for k in self.pkgs[pkg])
        return self._index[pkg]

    def code(self, key: str) -> list[int]:
        if key not in self._code:
            self._code[key] = sorted(code_lines(self.files[key]) or ())
        return self._code[key]

    def modules(self, key: str) -> set[str]:
        if key not in self._modules:
            self._modules[key] = module_names(self.files[key])
        return self._modules[key]

    def bound(self, key: str) -> set[str] | None:
        if key not in self._bound:
            self._bound[key] = bound_names(self.files[key])
        return self._bound[key]

    def _distractors(self, pkg: str, target: str, n: int) -> list[ContextChunk]:
        out: list[ContextChunk] = []
        for _ in range(n * 3):
            other = self.rng.choice(self.targets)
            if other == target:
                continue
            defs = [d for ds in self.index(package_of(other)).by_name.values() for d in ds if d.path == other]
            if defs:
                out.append(self.rng.choice(defs).chunk())
            if len(out) >= n:
                break
        return out

    def example(self) -> tuple[str, str, str, str, list[ContextChunk]] | None:
        """(doc key, prefix, middle, suffix, context) of one example, or None when the draw fails."""
        rng = self.rng
        key = rng.choice(self.targets)
        text = self.files[key]
        bound = self.bound(key)
        if bound is None:
            return None
        pkg = package_of(key)
        index = self.index(pkg)
        lines = text.split("\n")
        code = self.code(key)
        mods = self.modules(key)
        prefix = middle = suffix = ""
        names: list[str] = []
        if rng.random() < CROSS_LINE_SHARE:
            cands = [i for i in code if len(lines[i].strip()) >= 6
                     and not lines[i].lstrip().startswith(('"', "'")) and index.cross_names(lines[i], key, bound, mods)]
            if not cands:
                return None
            i = rng.choice(cands)
            n = 1 if rng.random() < 0.7 else rng.randint(2, 3)
            start = sum(len(ln) + 1 for ln in lines[:i])
            start += len(lines[i]) - len(lines[i].lstrip(" \t"))
            if n == 1 and rng.random() < 0.3:  # the cursor inside the line, before a cross-file name
                line_end = start + len(lines[i].strip())
                start = rng.randrange(start, max(start + 1, line_end - 2))
            end = sum(len(ln) + 1 for ln in lines[: min(len(lines), i + n)]) - 1
            prefix, middle, suffix = text[:start], text[start:end], text[end:]
            for ln in middle.split("\n"):
                names += [w for w in index.cross_names(ln, key, bound, mods) if w not in names]
        else:
            ex = self._cut(text, rng.choice(("line", "multi_line", "span")), rng)
            if ex is None:
                return None
            prefix, middle, suffix = ex.prefix, ex.middle, ex.suffix
            i = prefix.count("\n")
        for w in near_names(index, lines, i, key, bound, mods):
            if w not in names:
                names.append(w)
        if rng.random() < NO_CONTEXT_SHARE:
            return key, prefix, middle, suffix, []
        chunks = index.context_for(names, key, limit=4)
        if chunks and rng.random() < 0.5:  # the gatherer's order is not the middle's
            rng.shuffle(chunks)
        distract = self._distractors(pkg, key, rng.randint(0, MAX_DISTRACTORS))
        for c in distract:
            chunks.insert(rng.randint(0, len(chunks)), c)
        return key, prefix, middle, suffix, chunks

    def next(self):  # noqa: ANN201 - engine.train.data.Encoded (training-only import)
        from engine.train.data import Encoded

        sp = self.sp
        while True:
            got = self.example()
            if got is None:
                continue
            key, prefix, middle, suffix, chunks = got
            if self.rng.random() < 0.1:
                suffix = ""
            lay = self.builder.layout(prefix, suffix, heal=False, doc_key=display_path(key), context=chunks)
            mid = self.builder.encode(middle)
            if not mid or len(mid) + 1 > self.max_middle:
                continue
            mid = mid + [sp.end_of_middle]
            mid += [sp.end_of_middle] * ((-len(mid)) % self.block)
            return Encoded(lay.ids + mid, len(lay.ids), len(mid))
