"""Autoregressive-equivalent baseline: one token per forward, left to right."""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from engine.decoding.policies.base import BlockView, CommitOnly


@dataclass(frozen=True)
class OnePerStepConfig:
    pass


class OnePerStep(CommitOnly):
    name = "one_per_step"

    def __init__(self, config: OnePerStepConfig | None = None) -> None:
        self.config = config or OnePerStepConfig()

    def commits(self, view: BlockView, cand: Tensor) -> Tensor:
        commit = cand & False
        if bool(cand.any()):
            commit[int(cand.nonzero()[0])] = True
        return commit
