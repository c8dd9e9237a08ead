"""Token healing: a cursor inside a word ends the prompt mid-token; the engine backs off the
partial token and lets the first generated token be only one that extends it. `Healing` is the
`engine.prompt.builder.Healer` the text engine hands its prompt builder."""

from __future__ import annotations

import bisect
import re
from collections import OrderedDict
from collections.abc import Callable

import torch

HEALABLE = re.compile(r" ?[A-Za-z_][A-Za-z0-9_]*|[A-Za-z0-9_]+")  # a word fragment at the cursor


class Healing:
    """Token healing: back off a prompt's partial last token and constrain the first new one.

    The tokens that extend a partial text are found by binary search over the vocabulary's
    texts in sorted order (a 150k vocabulary scanned per keystroke would cost tens of ms);
    the answers are kept in a bounded LRU."""

    MAX_CACHED = 1024

    def __init__(self, vocab_texts: list[str], special: set[int], rows: int | None = None,
                 decode: Callable[[list[int]], str] | None = None) -> None:
        """`special`: ids never offered (added and special tokens, wherever they sit). `rows`: the
        width of the model's logits (its embedding rows), which real checkpoints pad beyond the
        tokenizer's size (LLaDA2: 157,184 rows for 157,153 tokens); the allowed sets have this
        width, the padding rows never allowed. Default: the tokenizer's size. `decode`: the
        tokenizer's ids -> text (`back_off`); default the tokens' texts joined."""
        if rows is not None and rows < len(vocab_texts):
            raise ValueError(f"the model has {rows} output rows but the tokenizer {len(vocab_texts)} tokens")
        self.texts, self.size = vocab_texts, len(vocab_texts) if rows is None else rows
        order = sorted((t, i) for i, t in enumerate(vocab_texts) if i not in special and t)
        self._keys = [t for t, _ in order]
        self._ids = [i for _, i in order]
        self._cache: OrderedDict[str, torch.Tensor | None] = OrderedDict()
        self.decode = decode if decode is not None else (lambda ids: "".join(vocab_texts[i] for i in ids))

    def back_off(self, ids: list[int]) -> tuple[int, str, torch.Tensor | None]:
        """Back off the trailing word fragment of `ids` (its last 1-3 tokens) when some token
        extends it: (tokens backed off, their text, the first token's allowed set)."""
        for k in range(min(3, len(ids)), 0, -1):
            tail = self.decode(ids[-k:])
            if 0 < len(tail) <= 24 and HEALABLE.fullmatch(tail):
                allowed = self.allowed(tail)
                if allowed is not None:
                    return k, tail, allowed
        return 0, "", None

    def allowed(self, partial: str) -> torch.Tensor | None:
        """bool [rows]: the non-special tokens whose text starts with `partial`; None when no
        token is longer than it (nothing to heal)."""
        if partial in self._cache:
            self._cache.move_to_end(partial)
            return self._cache[partial]
        lo = hi = bisect.bisect_left(self._keys, partial)
        longer = False
        while hi < len(self._keys) and self._keys[hi].startswith(partial):
            longer = longer or len(self._keys[hi]) > len(partial)
            hi += 1
        res = None
        if longer:
            res = torch.zeros(self.size, dtype=torch.bool)
            res[self._ids[lo:hi]] = True
        self._cache[partial] = res
        while len(self._cache) > self.MAX_CACHED:
            self._cache.popitem(last=False)
        return res
