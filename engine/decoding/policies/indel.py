"""LLaDA2.2's draft-then-edit rule with insertions and deletions (SGLang's JointThresholdInDel).

The rule runs inside `engine.decoding.indel.InDelSequence`, which owns the block's structural
edits; this module holds its configuration and its registry entry. Defaults are SGLang's.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from engine.decoding.policies.base import BlockView, Decision


@dataclass(frozen=True)
class InDelConfig:
    threshold: float = 0.5  # M2T: a mask commits above it (else the surest 1 + new masks do)
    edit_threshold: float = 0.0  # T2T: a generated token is replaced above it
    max_post_edit_steps: int = 16  # steps after the block's original masks are gone, then cleanup
    loop_repeats: int = 0  # the engine's unit-repeat bans stay off: in/del has its own loop guard


class InDel:
    name = "indel"

    def __init__(self, config: InDelConfig | None = None) -> None:
        self.config = config or InDelConfig()

    @property
    def edit_passes(self) -> int:
        return 0  # post-mask edit steps are part of the block's own steps

    def decide(self, view: BlockView) -> Decision:
        raise RuntimeError("the indel policy decides inside engine.decoding.indel.InDelSequence "
                           "(make_sequence builds one for a model with edit tokens)")

    def edit_only(self, view: BlockView) -> Tensor:
        raise RuntimeError("the indel policy makes no edit-only passes")
