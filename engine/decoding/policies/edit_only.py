"""Edit-only decoding: T2T over a canvas that holds no masks (next-edit suggestions).

The next-edit job (`engine.decoding.next_edit`) gives the model an existing stretch of code as
a committed draft and runs edit-only passes over it: a position is replaced when the model's
top token differs from the draft's and its probability reaches the edit threshold, as in
LLaDA2.1's draft-then-edit passes (`draft_edit.edits_of`). The new token is never one of
`ignore` (the model's special ids: mask, end-of-middle, padding, FIM markers): their mass
stays in the distribution, so a position whose top token is special is simply left alone.
Not a completion preset: it commits no masks (`decide` forces the leftmost one, so a caller
that misuses it still never stalls).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from engine.decoding.policies.base import BlockView, Decision, at_least_one
from engine.decoding.policies.draft_edit import edits_of


@dataclass(frozen=True)
class EditOnlyConfig:
    edit_threshold: float = 0.8
    edit_passes: int = 4  # passes at most (each one forward)
    ignore: frozenset[int] = field(default_factory=frozenset)  # ids never proposed as a replacement


class EditOnly:
    name = "edit_only"

    def __init__(self, config: EditOnlyConfig | None = None) -> None:
        self.config = config or EditOnlyConfig()
        self._ignore = torch.tensor(sorted(self.config.ignore), dtype=torch.long)

    @property
    def edit_passes(self) -> int:
        return self.config.edit_passes

    def edit_only(self, view: BlockView) -> Tensor:
        edit = edits_of(view, self.config.edit_threshold)
        if self._ignore.numel():
            edit = edit & ~torch.isin(view.top_id, self._ignore)
        return edit

    def decide(self, view: BlockView) -> Decision:
        return Decision(at_least_one(view.masked & False, view, "leftmost"), self.edit_only(view))
