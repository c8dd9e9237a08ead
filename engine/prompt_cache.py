"""Prompt cache across requests: reuse the KV entries of the longest shared token prefix.

With the suffix-first layout the cursor sits at the end of the prompt, so typing only
extends the prompt and a new request prefills just its new tokens (as llama.cpp's prompt
cache and SGLang's radix cache do). Bounded: an LRU of a few prompts.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import torch

from engine.model import Transformer


@dataclass
class Entry:
    tokens: list[int]
    k: list[torch.Tensor]  # per layer [n, kv_heads, head_dim]
    v: list[torch.Tensor]


def common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class PromptCache:
    def __init__(self, max_entries: int = 4) -> None:
        self.max_entries = max_entries
        self.entries: OrderedDict[str, Entry] = OrderedDict()

    def restore(self, model: Transformer, row: int, key: str, tokens: list[int]) -> int:
        """Copy the longest cached prefix of `tokens` into cache row `row`; returns its length."""
        best, best_key = 0, None
        for name, entry in self.entries.items():
            n = common_prefix(entry.tokens, tokens)
            if n > best or (n == best and name == key and n > 0):
                best, best_key = n, name
        if best_key is None or best == 0:
            return 0
        e = self.entries[best_key]
        self.entries.move_to_end(best_key)
        for c, ck, cv in zip(model.kv_caches(), e.k, e.v, strict=True):
            c.k[row, :best] = ck[:best]
            c.v[row, :best] = cv[:best]
        return best

    def store(self, model: Transformer, row: int, key: str, tokens: list[int]) -> None:
        n = len(tokens)
        ks, vs = [], []
        for c in model.kv_caches():
            ks.append(c.k[row, :n].clone())
            vs.append(c.v[row, :n].clone())
        self.entries[key] = Entry(list(tokens), ks, vs)
        self.entries.move_to_end(key)
        while len(self.entries) > self.max_entries:
            self.entries.popitem(last=False)

    def clear(self) -> None:
        self.entries.clear()
