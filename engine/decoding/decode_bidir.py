"""Decoding for fully bidirectional diffusion models (LLaDA-8B, Dream) with an approximate cache.

The canvas is prompt + masked middle + suffix: the suffix follows the masked span, as these
models infill. Every position reads every other, so no KV entry is exact once any token
changes. As Fast-dLLM's dual cache does, each block starts with one full forward over the
whole canvas that rewrites the cache row (prefix, every middle block and the suffix) and
gives the block's first logits; the block's further steps feed only the block (plus the
position before it when logits are shifted) and read the rest from that cache, which is as
old as the block's first step. `refresh="step"` makes every forward a full one: the uncached
reference, and the only mode for a model without a KV cache (`--trust-remote-code`).

`BidirSequence` subclasses `decode.Sequence` and keeps its interface (prepare / update /
done / finish_event / final_middle / remask, fields `row`, `clean_len`, `phase`, `P`), so
`batch.execute` and the step loop (`engine.decoding.scheduler`) drive it unchanged. Policies, edits,
stop rules and events are the parent's. The completion ends at the first committed
end-of-middle token with nothing masked before it; trailing end-of-text tokens are trimmed.
"""

from __future__ import annotations

from collections.abc import Sequence as Seq
from typing import Literal

from torch import Tensor, nn

from engine.decoding.decode import CLEAN, Feed, Sequence, Staged, StopFn
from engine.decoding.indel import check_routing_block, make_indel_sequence
from engine.decoding.policies import InDel, Policy
from engine.decoding.rejections import TooLong
from engine.model.native import ModelConfig, SpecialTokens

Refresh = Literal["block", "step"]


class BidirSequence(Sequence):
    """One request on a bidirectional model: prompt, `cap` middle slots, then the suffix."""

    def __init__(self, prompt: list[int], suffix: Seq[int], special: SpecialTokens, policy: Policy, block: int,
                 max_new_tokens: int, shift: bool, row: int = 0, refresh: Refresh = "block",
                 first_allowed: Tensor | None = None, stop_fn: StopFn | None = None,
                 max_len: int = 2048) -> None:
        super().__init__(prompt, special, policy, block, max_new_tokens, shift, row=row,
                         first_allowed=first_allowed, stop_fn=stop_fn, max_len=1 << 62)
        self.suffix = list(suffix)
        self.L = self.P + self.cap + len(self.suffix)
        if self.L + 1 > max_len:  # execute keeps the row's last slot as scratch
            raise TooLong(f"canvas of {self.L} tokens (prompt {self.P} + {self.cap} new + suffix "
                             f"{len(self.suffix)}) exceeds the cache ({max_len})")
        self.refresh = refresh
        self.fresh_at: int | None = None  # block whose first step refreshed the cache row
        self.refreshes = 0  # full forwards so far
        self._full = True

    def canvas(self) -> list[int]:
        return [*self.prompt, *self.middle.tolist(), *self.suffix]

    def prepare(self) -> Feed:
        P, sh = self.P, int(self.shift)
        canvas = self.canvas()
        f = Feed.empty()
        self._full = self.phase == "multi" or self.refresh == "step" or self.fresh_at != self.block_start
        if self._full:
            self.clean_len = 0  # the whole row is rewritten
            for p, t in enumerate(canvas):
                f.add(t, p, p, CLEAN, -1)
            if self.phase == "multi":
                where = range(0, -(-self.live_limit() // self.b) * self.b)
            else:
                blk = self._block()
                where = range(blk.start, blk.stop)
            f.logits_at = [P + j - sh for j in where]
        else:
            self.clean_len = self.L  # the row stays valid; the block overwrites its own slots
            blk = self._block()
            for p in range(P + blk.start - sh, P + blk.stop):
                f.add(canvas[p], p, p, CLEAN, -1)
            f.logits_at = list(range(blk.stop - blk.start))
        f.kv_len = self.L
        return f

    def stage(self, logits: Tensor) -> Staged:
        self.forwards += 1
        if self._full:
            self.fresh_at, self.refreshes = self.block_start, self.refreshes + 1
        if self.phase == "multi":
            n = -(-self.live_limit() // self.b) * self.b
            return self._stage(logits[:n], slice(0, n), edit_only=True, multi=True)
        return self._stage(logits, self._block(), edit_only=self.phase == "edit", multi=False)

    def _after_multi_pass(self) -> None:
        pass  # every forward of a multi-block pass is a full one

    def final_middle(self) -> list[int]:
        mid = super().final_middle()
        trail = {self.sp.end_of_text, self.sp.end_of_middle, self.sp.pad, self.sp.mask}
        while mid and mid[-1] in trail:
            mid.pop()
        return mid

    def remask(self, positions: list[int], reused: int) -> None:
        super().remask(positions, 0)
        self.fresh_at, self.clean_len = None, 0


def make_sequence(model: nn.Module, prompt: list[int], policy: Policy, max_new_tokens: int,
                  suffix: Seq[int] = (), row: int = 0, reused: int = 0, max_len: int = 2048,
                  refresh: Refresh | None = None, first_allowed: Tensor | None = None,
                  stop_fn: StopFn | None = None, block: int | None = None) -> Sequence:
    """The decoder for `model`'s attention regime: an exact block-causal `Sequence` (aligned
    blocks when the model asks for them, as LLaDA2 does) or a `BidirSequence`. A model with
    no KV cache (`layers` empty) always refreshes every step. `block` overrides the model's."""
    c: ModelConfig = model.config  # type: ignore[assignment]
    b = block or c.block_size
    if c.attention == "bidirectional":
        no_cache = len(getattr(model, "layers", [])) == 0
        mode: Refresh = "step" if no_cache else (refresh or "block")
        return BidirSequence(prompt, suffix, c.special, policy, b, max_new_tokens, c.shift_logits,
                             row=row, refresh=mode, first_allowed=first_allowed, stop_fn=stop_fn, max_len=max_len)
    if suffix:
        raise ValueError("a block-causal model reads the suffix inside its prompt (suffix-first FIM layout)")
    check_routing_block(model, b)
    if isinstance(policy, InDel):  # LLaDA2.2's insert/delete rule (engine.decoding.indel)
        return make_indel_sequence(model, prompt, policy, max_new_tokens, row=row, reused=reused,
                                   first_allowed=first_allowed, stop_fn=stop_fn, max_len=max_len, block=b)
    return Sequence(prompt, c.special, policy, b, max_new_tokens, c.shift_logits, row=row,
                    reused=reused, first_allowed=first_allowed, stop_fn=stop_fn, max_len=max_len,
                    align=bool(getattr(model, "aligned_blocks", False)))
