"""LLaDA's fixed-steps schedule with low-confidence remasking.

Each block gets `steps` forwards; the masked positions of the block are spread evenly over
them (the first `n % steps` steps take one more), and each step commits that many of the
most confident masked positions.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from engine.decoding.policies.base import BlockView, CommitOnly


@dataclass(frozen=True)
class LowConfidenceConfig:
    steps: int = 8  # forwards per block


def tokens_per_step(n_masked: int, steps: int) -> list[int]:
    base, extra = divmod(n_masked, steps)
    return [base + (1 if i < extra else 0) for i in range(steps)]


class LowConfidence(CommitOnly):
    name = "low_confidence"

    def __init__(self, config: LowConfidenceConfig | None = None) -> None:
        self.config = config or LowConfidenceConfig()

    def commits(self, view: BlockView, cand: Tensor) -> Tensor:
        n_cand = int(cand.sum())
        sched = tokens_per_step(view.masked_at_start, self.config.steps)
        k = sched[view.step] if view.step < len(sched) else n_cand
        k = min(max(k, 1 if n_cand else 0), n_cand)
        commit = cand & False
        if k:
            score = view.top_prob.masked_fill(~cand, -1.0)
            commit[score.topk(k).indices] = True
        return commit
