"""The first identifier under a name constraint: a token trie of the names the code has.

The language server sends, with a request whose cursor ends an identifier prefix in a use
position, the known names that extend it (`engine.api.Names`). The engine turns each into
token paths that continue the prompt (after token healing's backed-off text: the first
token of a path is a vocabulary token that starts with it) and ends the identifier there (the
token after a path does not start with an identifier character). This module holds the paths
and applies them to a sequence's first-block logits, token ids only:

- on the first draft step, each path is scored by the model's log-probabilities at middle
  positions 0..m-1 (its tokens) plus the log-probability that position m ends the identifier.
  Those are the first step's parallel predictions, all masks around them, so the score is
  the mean-field estimate; one forward chooses, no extra forward is spent;
- the model keeps its own name when its greedy tokens leave the trie with a confidence (the
  product of their top probabilities) of at least `keep_own_above`: the constraint is then
  dropped for the request and decoding goes on as without it;
- otherwise the best path is forced: its rows become one-hot and the row after it loses the
  tokens that would extend the identifier, in this step and every later pass over block 0
  (any policy commits a one-hot row; edits cannot change it).

The best score per first token is also what the alternatives rank (`first_scores`): a fork
forced to another first token chooses the best path that starts with it, so cycling shows
other names.
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
    ident_start: Tensor  # bool [V]
    keep_own_above: float = 1.01
    chosen: tuple[int, ...] | None = None
    released: bool = False  # the model kept its own name (or no path fits the block)
    first_scores: Tensor | None = None  # [V] best path score per first token, -inf elsewhere
    stats: dict[str, object] = field(default_factory=dict)

    def apply(self, logits: Tensor) -> Tensor:
        """Constrain `logits` [R, V] whose row j predicts middle position j (first_allowed
        already applied); returns them (written in place: the caller's copy)."""
        if self.released:
            return logits
        if self.chosen is None:
            self._choose(logits)
            if self.chosen is None:
                return logits
        p = self.chosen
        rows = logits.shape[0]
        for j, t in enumerate(p[:rows]):
            keep = logits[j, t].clone()
            logits[j].fill_(NEG_INF)
            logits[j, t] = keep if math.isfinite(float(keep)) else 0.0
        if len(p) < rows:
            logits[len(p), self.ident_start.to(logits.device)] = NEG_INF
        return logits

    def _choose(self, logits: Tensor) -> None:
        rows = logits.shape[0]
        fits = [i for i, p in enumerate(self.paths) if len(p) < rows]
        if not fits:
            self.released = True
            self.stats["names"] = "no path fits the block"
            return
        lp = torch.log_softmax(logits.float(), dim=-1)
        ends = torch.logsumexp(lp.masked_fill(self.ident_start.to(lp.device)[None], NEG_INF), dim=-1)
        scores = torch.empty(len(fits))
        for n, i in enumerate(fits):
            p = self.paths[i]
            s = ends[len(p)]
            for j, t in enumerate(p):
                s = s + lp[j, t]
            scores[n] = s
        own = self._own_confidence(lp)
        if own is not None and own >= self.keep_own_above:
            self.released = True
            self.stats.update(names="model kept its own", own_confidence=round(own, 4))
            return
        order = scores.argsort(descending=True).tolist()
        if not math.isfinite(float(scores[order[0]])):  # every path banned (a forced first token)
            self.released = True
            self.stats["names"] = "no path allowed"
            return
        best = fits[order[0]]
        self.chosen = self.paths[best]
        first = torch.full((logits.shape[1],), NEG_INF)
        for n in reversed(order):  # best last: it wins a shared first token
            p = self.paths[fits[n]]
            if p:
                first[p[0]] = scores[n]
        self.first_scores = first
        self.stats.update(names="constrained", name=self.owners[best], candidates=len(set(self.owners)))

    def _own_confidence(self, lp: Tensor) -> float | None:
        """None when the model's greedy tokens spell a listed name and end it; else the
        confidence of its own name: the product of the greedy tokens' probabilities up to
        and including the first that leaves the trie."""
        top_lp, top = lp.max(dim=-1)
        greedy = top.tolist()
        prefixes = {p[:k] for p in self.paths for k in range(len(p) + 1)}
        full = set(self.paths)
        acc = 0.0
        for j in range(lp.shape[0]):
            walked = tuple(greedy[:j])
            if walked in full and not bool(self.ident_start[greedy[j]]):
                return None  # a listed name, ended
            acc += float(top_lp[j])
            if walked + (greedy[j],) not in prefixes:
                return math.exp(acc)
        return None
