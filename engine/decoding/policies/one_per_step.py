"""Autoregressive-equivalent baseline: one token per forward, left to right."""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from engine.decoding.policies.base import BlockView, Decision, no_edits


@dataclass(frozen=True)
class OnePerStepConfig:
    pass


class OnePerStep:
    name = "one_per_step"
    edit_passes = 0

    def __init__(self, config: OnePerStepConfig | None = None) -> None:
        self.config = config or OnePerStepConfig()

    def decide(self, view: BlockView) -> Decision:
        cand = view.masked & view.live
        commit = cand & False
        if bool(cand.any()):
            commit[int(cand.nonzero()[0])] = True
        return Decision(commit, no_edits(view))

    def edit_only(self, view: BlockView) -> Tensor:
        return no_edits(view)
