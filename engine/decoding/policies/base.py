"""What a decoding policy sees at one step of one block, and what it decides."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from torch import Tensor


@dataclass
class BlockView:
    """The active block at one step. All tensors have shape [n] (n = block positions).

    masked:   still [MASK] (candidates for mask-to-token commits)
    editable: committed, generated tokens the policy may replace (token-to-token edits)
    live:     positions that still belong to the completion (not after its end)
    current:  the token on the canvas (undefined where masked)
    top_id / top_prob: the model's argmax and its probability at each position
    cur_prob: the probability the model gives the current token (0 where masked)
    """

    masked: Tensor
    editable: Tensor
    live: Tensor
    current: Tensor
    top_id: Tensor
    top_prob: Tensor
    cur_prob: Tensor
    step: int  # forwards spent on this block so far (0 at its first)
    masked_at_start: int  # live masked positions when the block began


@dataclass
class Decision:
    commit: Tensor  # bool [n]: masked positions that take top_id now (M2T)
    edit: Tensor  # bool [n]: committed positions replaced by top_id now (T2T)


class Policy(Protocol):
    name: str

    def decide(self, view: BlockView) -> Decision: ...

    @property
    def edit_passes(self) -> int:
        """Edit-only passes after a block has no masks left (0 for policies without T2T)."""
        ...

    def edit_only(self, view: BlockView) -> Tensor:
        """bool [n]: the edits of one edit-only pass."""
        ...


def no_edits(view: BlockView) -> Tensor:
    return view.masked & False


class CommitOnly:
    """A policy of mask-to-token commits only (no edits, no edit-only passes): a subclass
    says which of the live masked positions (`cand`) commit at this step."""

    name = ""
    edit_passes = 0

    def decide(self, view: BlockView) -> Decision:
        return Decision(self.commits(view, view.masked & view.live), no_edits(view))

    def commits(self, view: BlockView, cand: Tensor) -> Tensor:
        raise NotImplementedError

    def edit_only(self, view: BlockView) -> Tensor:
        return no_edits(view)


def at_least_one(commit: Tensor, view: BlockView, fallback: str = "max") -> Tensor:
    """When nothing passed, force one live masked position so that a step never stalls:
    the most confident one ("max", Fast-dLLM's choice) or the leftmost ("leftmost": the
    position an autoregressive reading predicts best; it also stops a model that is surest
    of end-of-middle padding from spending a forward per padding token, right to left)."""
    cand = view.masked & view.live
    if bool(commit.any()) or not bool(cand.any()):
        return commit
    out = commit.clone()
    if fallback == "leftmost":
        out[int(cand.nonzero()[0])] = True
    else:
        out[int(view.top_prob.masked_fill(~cand, -1.0).argmax())] = True
    return out
