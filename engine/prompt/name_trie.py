"""Known names as token paths for the first-identifier constraint (`engine.decoding.constraint`).

A name that extends the identifier the prompt ends with becomes the token paths that continue
the prompt after token healing's backed-off text: the first token any vocabulary token that
covers the healed text and is a prefix of the continuation (the longest few), the rest the
tokenizer's own encoding. Masks are sized by the logits' width (the model's padded
vocabulary), not the tokenizer's. Paths are kept per (typed, healed text, names) in a small
LRU: consecutive keystrokes with the same names reuse them.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

import torch
from tokenizers import Tokenizer
from torch import Tensor

from engine.api import Names
from engine.decoding.constraint import NameConstraint

MAX_PATH_TOKENS = 12  # a name of more tokens is left out of the trie
FIRST_TOKEN_CHOICES = 4  # tokenizations per name: the longest first tokens that fit
Paths = tuple[list[tuple[int, ...]], list[str]]


def is_ident_char(c: str) -> bool:
    return c.isalnum() or c == "_" or c == "$"


def ident_start_mask(texts: list[str], width: int) -> Tensor:
    """bool [width]: the tokens whose text starts with an identifier character (they would
    extend a name); ids past the tokenizer's texts (padding rows of the logits) count as such,
    so they never end a name."""
    m = torch.ones(width, dtype=torch.bool)
    for i, t in enumerate(texts[:width]):
        m[i] = bool(t) and is_ident_char(t[0])
    return m


def name_paths(names: tuple[str, ...], typed: str, partial: str, vocab: dict[str, int],
               encode: Callable[[str], list[int]], width: int, special: frozenset[int]) -> Paths:
    """Token paths of `names` (each extends `typed`, the identifier prefix the prompt ends
    with) after the healed text `partial` (a suffix of the prompt's text, maybe with a leading
    space, that the middle's first token must start with): per name up to
    FIRST_TOKEN_CHOICES first tokens (the longest vocabulary tokens that cover `partial` and
    are a prefix of the continuation), each followed by the canonical encoding of the rest.
    Returns (paths, the name of each path)."""
    paths: list[tuple[int, ...]] = []
    owners: list[str] = []
    seen: set[tuple[int, ...]] = set()
    for name in names:
        if not name.startswith(typed):
            continue
        s = partial + name[len(typed):]
        cand: list[tuple[int, ...]] = []
        if not s:  # the name is complete at the cursor: the path is empty, only the end counts
            cand.append(())
        else:
            for k in range(len(s), max(1, len(partial)) - 1, -1):
                tid = vocab.get(s[:k])
                if tid is None or tid in special or tid >= width:
                    continue
                rest = tuple(encode(s[k:])) if k < len(s) else ()
                cand.append((tid, *rest))
                if len(cand) >= FIRST_TOKEN_CHOICES:
                    break
        for p in cand:
            if len(p) <= MAX_PATH_TOKENS and p not in seen and all(tid < width for tid in p):
                seen.add(p)
                paths.append(p)
                owners.append(name)
    return paths, owners


class NamePaths:
    """Builds a request's `NameConstraint` from its `Names`."""

    MAX_CACHED = 64

    def __init__(self, texts: list[str], special: frozenset[int], width: int, tok: Tokenizer, mask_id: int,
                 enabled: bool = True) -> None:
        self.enabled, self.width, self.special, self.mask_id = enabled, width, special, mask_id
        self.vocab: dict[str, int] = {}
        for i, t in enumerate(texts):
            if t and i not in special and i < width:
                self.vocab.setdefault(t, i)
        self._encode: Callable[[str], list[int]] = lambda s: tok.encode(s, add_special_tokens=False).ids
        self.ident_start = ident_start_mask(texts, width)
        self._cache: OrderedDict[tuple[str, str, tuple[str, ...]], Paths] = OrderedDict()

    def constraint(self, prefix: str, names: Names, partial: str) -> NameConstraint | None:
        """The constraint of a request whose prompt ends with `prefix` (healed: `partial` backed
        off); None when it cannot apply (a chat format, a prefix that does not end with the
        typed identifier, a healed text that is not the identifier's tail, no path)."""
        typed = names.typed
        if not self.enabled or not prefix.endswith(typed) or not prefix.endswith(partial) \
                or len(partial.lstrip(" ")) > len(typed):
            return None
        key = (typed, partial, names.names)
        got = self._cache.get(key)
        if got is None:
            got = name_paths(names.names, typed, partial, self.vocab, self._encode, self.width, self.special)
            self._cache[key] = got
            while len(self._cache) > self.MAX_CACHED:
                self._cache.popitem(last=False)
        else:
            self._cache.move_to_end(key)
        paths, owners = got
        if not paths:
            return None
        return NameConstraint(list(paths), list(owners), self.ident_start, self.mask_id, names.keep_own_above)
