"""LLaDA2.2's draft-then-edit rule with insertions and deletions (SGLang's JointThresholdInDel).

The rule runs inside `engine.decoding.indel.InDelSequence`, which owns the block's structural
edits; this module holds its configuration, its registry entry and the presets' in/del
configurations. Defaults are the published ones: SGLang 0.5.23's (`joint_threshold_indel.py`:
threshold 0.5, edit_threshold 0, max_post_edit_steps 16) and the model card's.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from engine.decoding.policies.base import BlockView, Decision


@dataclass(frozen=True)
class InDelConfig:
    threshold: float = 0.5  # M2T: a mask commits above it (else the surest 1 + new masks do)
    edit_threshold: float = 0.0  # T2T: a generated token is replaced above it
    max_post_edit_steps: int = 16  # steps without an original mask, then the cleanup round
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


PUBLISHED = InDelConfig()
# preset -> its in/del configuration, for a model with edit tokens (engine.decoding.indel.policy_for).
# Speedy is the published rule. Quality differs from it in one value, its mask threshold 0.9
# (where the published rule has 0.5): a mask commits only when the model is surer, so a block
# takes more forwards; edits and the post-edit budget are the published ones. The `_multi`
# variants decode as their preset (in/del has no multi-block passes); any other preset: the
# published rule. Quality's 0.9 is not measured on a real LLaDA2.2 checkpoint (none is stored here).
INDEL_PRESETS: dict[str, InDelConfig] = {
    "speedy": PUBLISHED,
    "quality": InDelConfig(threshold=0.9),
}


def indel_config(preset: str) -> InDelConfig:
    """The in/del configuration a preset decodes with (INDEL_PRESETS, else the published one)."""
    return INDEL_PRESETS.get(preset.removesuffix("_multi"), PUBLISHED)
