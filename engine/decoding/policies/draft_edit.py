"""LLaDA2.1's draft-then-edit rule: M2T commits above a mask threshold, T2T edits above an
edit threshold, then edit-only passes until a fixed point.

Speedy drafts with a low mask threshold and relies on edits; Quality drafts carefully.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from engine.decoding.policies.base import BlockView, Decision, at_least_one


@dataclass(frozen=True)
class DraftEditConfig:
    mask_threshold: float = 0.5
    edit_threshold: float = 0.8
    edit_passes: int = 3  # edit-only passes after the block's masks are gone
    multi_block: bool = False  # final edit passes reach back over the whole completion
    # skip the edit-only passes of a block whose every token was committed at or above the
    # edit threshold and whose last step edited nothing (a pass could then rarely change it)
    skip_confident_blocks: bool = True
    fallback: str = "leftmost"  # the forced commit when nothing passes (see base.at_least_one)
    loop_repeats: int = 0  # forbid a token completing this many back-to-back copies (engine.decoding.loops); 0: off
    # commit up to this many more masked tokens a step where the model's top token is the
    # context's guess (engine.decoding.lookup); 0: off
    context_agreement: int = 0


# the loop guard raises edit similarity at no cost in exact match (bench/loops.py, BENCHMARKS.md)
SPEEDY = DraftEditConfig(mask_threshold=0.5, edit_threshold=0.8, edit_passes=3, loop_repeats=4)
QUALITY = DraftEditConfig(mask_threshold=0.9, edit_threshold=0.9, edit_passes=2, loop_repeats=4)


def edits_of(view: BlockView, threshold: float) -> Tensor:
    return view.editable & view.live & (view.top_id != view.current) & (view.top_prob >= threshold)


class DraftEdit:
    name = "draft_edit"

    def __init__(self, config: DraftEditConfig | None = None) -> None:
        self.config = config or SPEEDY

    @property
    def edit_passes(self) -> int:
        return self.config.edit_passes

    def needs_edit_pass(self, commit_conf: Tensor, last_step_edited: bool) -> bool:
        """Whether a block whose tokens were committed with `commit_conf` gets edit-only passes."""
        if self.config.edit_passes == 0:
            return False
        if not self.config.skip_confident_blocks or last_step_edited:
            return True
        return bool((commit_conf < self.config.edit_threshold).any())

    def decide(self, view: BlockView) -> Decision:
        commit = view.masked & view.live & (view.top_prob >= self.config.mask_threshold)
        return Decision(at_least_one(commit, view, self.config.fallback), edits_of(view, self.config.edit_threshold))

    def edit_only(self, view: BlockView) -> Tensor:
        return edits_of(view, self.config.edit_threshold)
