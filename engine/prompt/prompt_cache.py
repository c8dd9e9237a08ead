"""Prompt cache across requests: reuse the KV entries of the longest shared token prefix.

With the suffix-first layout the cursor sits at the end of the prompt, so typing only
extends the prompt and a new request prefills just its new tokens (as llama.cpp's prompt
cache and SGLang's radix cache do). Bounded: an LRU of a few prompts.

Entries are scoped to an owner (the daemon: one connection): a prompt is only ever matched
against its own owner's prompts, so one client's text never changes what another can
measure (`reused_tokens`, prefill time). The in-process engine has one owner, None. The
owner of a call is its `owner` argument, else the scope set with `scoped` (the scheduler
sets it around `TextEngine.prepare` / `fork`, which call `restore` themselves). When full,
the owner holding most entries loses its least recently used one, so a client that fills
the cache evicts its own prompts before anyone else's.
"""

from __future__ import annotations

import contextlib
from collections import Counter, OrderedDict
from collections.abc import Hashable, Iterator
from dataclasses import dataclass

import torch

from engine.model.native import Transformer

_SCOPE = object()  # "the owner set by `scoped`"


@dataclass
class Entry:
    tokens: list[int]
    k: list[torch.Tensor]  # per layer [n, kv_heads, head_dim]
    v: list[torch.Tensor]
    owner: Hashable = None


def common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def entry_name(owner: Hashable, key: str) -> Hashable:
    """The entries' key: the document key itself for the default owner (None)."""
    return key if owner is None else (owner, key)


class PromptCache:
    def __init__(self, max_entries: int = 4) -> None:
        self.max_entries = max_entries
        self.entries: OrderedDict[Hashable, Entry] = OrderedDict()
        self.owner: Hashable = None  # the scope of calls that name no owner

    @contextlib.contextmanager
    def scoped(self, owner: Hashable) -> Iterator[None]:
        """Calls inside (on this thread: the cache is the model thread's) act for `owner`."""
        prev, self.owner = self.owner, owner
        try:
            yield
        finally:
            self.owner = prev

    def _owner(self, owner: Hashable) -> Hashable:
        return self.owner if owner is _SCOPE else owner

    def restore(self, model: Transformer, row: int, key: str, tokens: list[int],
                owner: Hashable = _SCOPE) -> int:
        """Copy the longest prefix of `tokens` cached by the same owner into cache row `row`;
        returns its length."""
        who = self._owner(owner)
        mine = entry_name(who, key)
        best, best_name = 0, None
        for name, entry in self.entries.items():
            if entry.owner != who:
                continue
            n = common_prefix(entry.tokens, tokens)
            if n > best or (n == best and name == mine and n > 0):
                best, best_name = n, name
        if best_name is None or best == 0:
            return 0
        e = self.entries[best_name]
        self.entries.move_to_end(best_name)
        for c, ck, cv in zip(model.kv_caches(), e.k, e.v, strict=True):
            c.k[row, :best] = ck[:best]
            c.v[row, :best] = cv[:best]
        return best

    def store(self, model: Transformer, row: int, key: str, tokens: list[int],
              owner: Hashable = _SCOPE) -> None:
        if self.max_entries <= 0:
            return
        who = self._owner(owner)
        n = len(tokens)
        ks, vs = [], []
        for c in model.kv_caches():
            ks.append(c.k[row, :n].clone())
            vs.append(c.v[row, :n].clone())
        name = entry_name(who, key)
        self.entries[name] = Entry(list(tokens), ks, vs, who)
        self.entries.move_to_end(name)
        while len(self.entries) > self.max_entries:
            self._evict()

    def _evict(self) -> None:
        """Drop the least recently used entry of the owner holding the most entries."""
        counts = Counter(e.owner for e in self.entries.values())
        most = max(counts.values())
        for name, entry in self.entries.items():  # oldest first
            if counts[entry.owner] == most:
                del self.entries[name]
                return

    def drop_owner(self, owner: Hashable) -> None:
        """Forget every entry of `owner` (a closed connection)."""
        for name in [n for n, e in self.entries.items() if e.owner == owner]:
            del self.entries[name]

    def clear(self) -> None:
        self.entries.clear()
