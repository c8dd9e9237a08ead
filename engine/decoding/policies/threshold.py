"""Fast-dLLM's confidence-threshold rule: commit every masked position at or above it."""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from engine.decoding.policies.base import BlockView, Decision, at_least_one, no_edits


@dataclass(frozen=True)
class ThresholdConfig:
    threshold: float = 0.9
    fallback: str = "max"  # when nothing passes: "max" (Fast-dLLM) or "leftmost"


class Threshold:
    name = "threshold"
    edit_passes = 0

    def __init__(self, config: ThresholdConfig | None = None) -> None:
        self.config = config or ThresholdConfig()

    def decide(self, view: BlockView) -> Decision:
        commit = view.masked & view.live & (view.top_prob >= self.config.threshold)
        return Decision(at_least_one(commit, view, self.config.fallback), no_edits(view))

    def edit_only(self, view: BlockView) -> Tensor:
        return no_edits(view)
