"""Fast-dLLM's confidence-threshold rule: commit every masked position at or above it."""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from engine.decoding.policies.base import BlockView, CommitOnly, at_least_one


@dataclass(frozen=True)
class ThresholdConfig:
    threshold: float = 0.9
    fallback: str = "max"  # when nothing passes: "max" (Fast-dLLM) or "leftmost"


class Threshold(CommitOnly):
    name = "threshold"

    def __init__(self, config: ThresholdConfig | None = None) -> None:
        self.config = config or ThresholdConfig()

    def commits(self, view: BlockView, cand: Tensor) -> Tensor:
        return at_least_one(cand & (view.top_prob >= self.config.threshold), view, self.config.fallback)
