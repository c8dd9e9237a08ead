"""The first identifier under a name constraint: a token trie of the names the code has.

The language server sends, with a request whose cursor ends an identifier prefix in a use
position, the known names that extend it (`engine.api.Names`). The engine turns each into
token paths that continue the prompt after token healing's backed-off text
(`engine.prompt.name_trie`); a path ends the identifier when the token after it does not start
with an identifier character. This module walks that trie on a sequence's first-block logits,
token ids only, one trie level per committed token:

- the first time it sees the logits, the model may keep its own name: when its greedy tokens
  leave the trie with a confidence (the product of their top probabilities) of at least
  `keep_own_above`, the constraint is dropped for the request;
- otherwise, at each step, the committed tokens from middle position 0 that follow a trie
  path are kept (their rows one-hot: no edit changes them); the next row may only take a
  child of that trie node (or, where a path ends there, a token that ends the identifier);
  the rows after it, as far as the longest path can reach, stay masked (their rows one-hot
  on [MASK], which no policy commits) so that nothing is committed inside the name before it
  is known. Where only one path remains, its tokens are forced at once (one step, no wait).
  Each choice is the model's own conditional probability among the trie's children, with the
  tokens before it committed: the ranking is the model's.

`first_scores` (the first row's log-probabilities over the trie's first tokens) is what the
alternatives rank: a fork forced to another first token walks the trie from it, so cycling
shows other names. Any policy works: a restricted row is renormalized by the confidences, a
held row is never committed, and a step always commits something (the restricted row is real).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import Tensor

NEG_INF = float("-inf")


@dataclass
class NameConstraint:
    """One sequence's constraint on its first identifier (see the module's docstring)."""

    paths: list[tuple[int, ...]]
    owners: list[str]
    ident_start: Tensor  # bool [V]: tokens that would extend an identifier
    mask_id: int
    keep_own_above: float = 1.01
    released: bool = False  # the model kept its own name, or the canvas left the trie
    started: bool = False
    first_scores: Tensor | None = None  # [V] the first row's log-probabilities on the trie's first tokens
    stats: dict[str, object] = field(default_factory=dict)

    @property
    def covered(self) -> int:
        """How many names have a path."""
        return len(set(self.owners))

    def __post_init__(self) -> None:
        self.full = set(self.paths)
        self.kids: dict[tuple[int, ...], set[int]] = {}
        self.reach: dict[tuple[int, ...], int] = {}  # a trie node -> the longest path through it
        self.below: dict[tuple[int, ...], set[tuple[int, ...]]] = {}
        for p in self.paths:
            for k in range(len(p) + 1):
                node = p[:k]
                self.reach[node] = max(self.reach.get(node, 0), len(p))
                self.below.setdefault(node, set()).add(p)
                if k < len(p):
                    self.kids.setdefault(node, set()).add(p[k])

    def _ident(self, logits: Tensor) -> Tensor:
        """`ident_start` sized by the logits' width (padding rows count as extending a name)."""
        m, width = self.ident_start, logits.shape[-1]
        if m.shape[0] != width:
            m = torch.cat([m, torch.ones(max(0, width - m.shape[0]), dtype=torch.bool)])[:width]
            self.ident_start = m
        return m.to(logits.device)

    def apply(self, logits: Tensor, middle: list[int], committed: list[bool]) -> Tensor:
        """Constrain `logits` [R, V], whose row j predicts middle position j (first_allowed
        already applied), given the canvas; returns them (changed in place: the caller's copy)."""
        if self.released:
            return logits
        rows = logits.shape[0]
        ident = self._ident(logits)
        if not self.started:
            self.started = True
            if not self._start(logits):
                return logits
        node: tuple[int, ...] = ()
        while len(node) < rows and committed[len(node)] and node + (middle[len(node)],) in self.reach:
            node = node + (middle[len(node)],)
        f = len(node)
        if f < rows and committed[f] and not (node in self.full and not bool(self.ident_start[middle[f]])):
            self.released = True  # the canvas left the trie (should not happen): stop constraining
            self.stats["names"] = "left the trie"
            return logits
        for j, t in enumerate(node):
            _one_hot(logits, j, t)
        if f >= rows:
            return logits
        below = self.below[node]
        if len(below) == 1:  # one path left: force it and its end
            p = next(iter(below))
            for j in range(f, min(len(p), rows)):
                _one_hot(logits, j, p[j])
            if len(p) < rows:
                logits[len(p), ident] = NEG_INF
            return logits
        allowed = torch.zeros(logits.shape[1], dtype=torch.bool, device=logits.device)
        if node in self.full:
            allowed |= ~ident
        allowed[[t for t in self.kids.get(node, ()) if t < logits.shape[1]]] = True
        logits[f, ~allowed] = NEG_INF
        if not bool(torch.isfinite(logits[f]).any()):
            self.released = True
            self.stats["names"] = "no path allowed"
            return logits
        for j in range(f + 1, min(self.reach[node] + 1, rows)):
            if not committed[j]:
                _one_hot(logits, j, self.mask_id, 0.0)
        return logits

    def _start(self, logits: Tensor) -> bool:
        """The first look: False (released) when the model keeps its own name."""
        rows = logits.shape[0]
        if not any(len(p) < rows for p in self.paths):
            self.released = True
            self.stats["names"] = "no path fits the block"
            return False
        lp = torch.log_softmax(logits.float(), dim=-1)
        own = self._own_confidence(lp)
        if own is not None and own >= self.keep_own_above:
            self.released = True
            self.stats.update(names="model kept its own", own_confidence=round(own, 4))
            return False
        first = torch.full((logits.shape[1],), NEG_INF)
        for t in self.kids.get((), ()):
            first[t] = lp[0, t].cpu()
        self.first_scores = first
        self.stats.update(names="constrained", candidates=len(set(self.owners)))
        return True

    def _own_confidence(self, lp: Tensor) -> float | None:
        """None when the model's greedy tokens spell a listed name and end it; else the
        confidence of its own name: the product of the greedy tokens' probabilities up to
        and including the first that leaves the trie."""
        top_lp, top = lp.max(dim=-1)
        greedy = top.tolist()
        acc = 0.0
        for j in range(lp.shape[0]):
            walked = tuple(greedy[:j])
            if walked in self.full and not bool(self.ident_start[greedy[j]]):
                return None  # a listed name, ended
            acc += float(top_lp[j])
            if walked + (greedy[j],) not in self.reach:
                return math.exp(acc)
        return None


def _one_hot(logits: Tensor, row: int, token: int, value: float | None = None) -> None:
    keep = float(logits[row, token]) if value is None else value
    logits[row].fill_(NEG_INF)
    logits[row, token] = keep if math.isfinite(keep) else 0.0
