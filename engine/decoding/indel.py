"""Levenshtein editing (LLaDA2.2): a block that keeps its length while tokens are inserted and
deleted, on the exact KV cache of `engine.decoding.decode.Sequence`.

The rule is SGLang's `JointThresholdInDel` (docs/models.md, "LLaDA2.2"), step by step on the
active block:

1. x, p: each position's argmax and its probability.
2. M2T: while masks the block began with (original masks) remain, commit the masks above
   `threshold` if there are at least 1 + (masks created by edits) of them, else the surest
   that many; once none remain, fill every mask at once. Only original masks drive this.
3. Once no original mask remains each step counts; past `max_post_edit_steps` the block is
   forced to finish and DELETE / INSERT are scrubbed from x (their logits set to -inf).
4. T2T: a generated token whose argmax differs is replaced above `edit_threshold`.
5. Nothing to write: the block is finished. A block state seen before (anti-loop guard,
   not on a forced step): the least confident changing position takes its best token not yet
   written there.
6. The writes, then the structural edits, left to right: DELETE drops its position, INSERT
   at i becomes [MASK, the token i held before this step]; the block is cut or padded with
   [MASK] (not original) back to its length, so at most one insertion per gap per step.

The block stops after `block + max_post_edit_steps + 1` steps (SGLang's bound). Cleanup: no
DELETE or INSERT ever stays on the canvas, and a mask left when the block stops is a blank
dropped from the answer (`final_middle`).

KV cache: edits stay inside the active block, which every forward feeds whole as its noisy
copy (its keys and values are recomputed each step; none of them is kept between steps). A
shift never crosses the block's end: the tail is cut, the gap filled with masks, so the
clean blocks before it (the prompt and finished blocks, whose entries the cache keeps) never
change, and the block's clean entries are written once, after it finishes, from its final
tokens. The cache therefore holds exactly what an uncached forward of the window would
compute (tests/engine/model/adapters/test_indel.py checks it step by step).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from engine.decoding.decode import Sequence
from engine.decoding.policies import Policy, make_policy
from engine.decoding.policies.indel import InDel, InDelConfig
from engine.decoding.steps import Staged, TokenEvent
from engine.model.native import SpecialTokens
from kernels import Confidence


@dataclass
class InDelCounts:
    """What the rule did over a request: the tests and the bench read it."""

    deletes: int = 0
    inserts: int = 0
    loop_guards: int = 0  # steps where the anti-loop guard changed a token
    forced: int = 0  # blocks finished by the post-edit budget (DELETE/INSERT scrubbed)
    blanks: int = 0  # masks left when a block stopped, dropped from the answer


@dataclass
class _Block:
    orig: Tensor  # bool [n]: the position holds one of the masks the block began with
    written: Tensor  # bool [n, V]: (position, token) pairs written before (the loop guard)
    seen: set[tuple[int, ...]] = field(default_factory=set)
    post_steps: int = 0


def restructure(new: list[int], old: list[int], orig: list[bool], mask: int, delete: int,
                split: int) -> tuple[list[int], list[bool]]:
    """Apply DELETE and INSERT (SPLIT) in `new` (the block after this step's writes), left to
    right: DELETE drops the position, INSERT at i gives [mask, old[i]] (old[i] keeps its
    original-mask mark, the new mask has none); then cut or pad with (mask, not original) to
    the block's length."""
    toks: list[int] = []
    marks: list[bool] = []
    for i, t in enumerate(new):
        if t == delete:
            continue
        if t == split:
            toks += [mask, old[i]]
            marks += [False, orig[i]]
        else:
            toks.append(t)
            marks.append(orig[i])
    n = len(new)
    toks, marks = toks[:n], marks[:n]
    return toks + [mask] * (n - len(toks)), marks + [False] * (n - len(marks))


class InDelSequence(Sequence):
    """An aligned block-causal `Sequence` whose draft steps follow the in/del rule."""

    def __init__(self, prompt: list[int], special: SpecialTokens, policy: InDel, block: int,
                 max_new_tokens: int, edit_tokens: tuple[int, int], **kw: object) -> None:
        super().__init__(prompt, special, policy, block, max_new_tokens, False, **kw)  # type: ignore[arg-type]
        if not self.align:
            raise ValueError("in/del decoding needs LLaDA2's aligned blocks")
        self.cfg: InDelConfig = policy.config
        self.delete, self.split = edit_tokens
        self.counts = InDelCounts()
        self.drafted = False  # the first complete draft was reported
        self._state: _Block | None = None

    def final_middle(self) -> list[int]:
        drop = (self.sp.mask, self.delete, self.split)
        return [t for t in super().final_middle() if t not in drop]

    def shown_tokens(self) -> list[int]:
        """Before the first complete draft, the committed prefix; after it, the whole draft
        with its holes (masks an insertion or a deletion opened, blanks) left out, so an edit
        shows as the insertion or deletion it is, not as a cut of the text after it."""
        if not self.drafted:
            return [t for t in super().shown_tokens() if t != self.sp.mask]
        return self.final_middle()

    def commit(self, st: Staged, conf: Confidence) -> TokenEvent:
        if st.multi or st.edit_only or self.phase != "draft":
            return super().commit(st, conf)
        return self._step(st)

    def _step(self, st: Staged) -> TokenEvent:
        sl, c = st.where, self.cfg
        logits = st.logits.float().cpu()
        cur = self.middle[sl].clone()
        n, mask = cur.shape[0], self.sp.mask
        if self._state is None:
            self._state = _Block(cur == mask, torch.zeros((n, logits.shape[-1]), dtype=torch.bool))
        s = self._state
        p, x = logits.softmax(-1).max(-1)
        masked = cur == mask
        n_orig, n_mask = int((s.orig & masked).sum()), int(masked.sum())
        fill = torch.zeros(n, dtype=torch.bool)
        if n_orig > 0:
            need = 1 + n_mask - n_orig
            high = masked & (p > c.threshold)
            if int(high.sum()) >= need:
                fill = high
            else:
                fill[torch.where(masked, p, float("-inf")).topk(min(need, n_mask)).indices] = True
        else:
            fill = masked
        forced = False
        if n_orig == 0:
            s.post_steps += 1
            if s.post_steps > c.max_post_edit_steps:
                forced = True
                scrub = logits.clone()
                scrub[:, [self.delete, self.split]] = float("-inf")
                x = torch.where((x == self.delete) | (x == self.split), scrub.argmax(-1), x)
        edit = ~masked & (p > c.edit_threshold) & (cur != x)
        write = fill | edit
        ev = TokenEvent("step", self.forwards)
        self.block_step += 1
        if not bool(write.any()):
            return self._end_block(ev)
        key = tuple(cur.tolist())
        if key in s.seen and not forced:
            changing = write & (x != cur)
            if bool(changing.any()):
                at = int(torch.where(changing, p, float("inf")).argmin())
                x[at] = int(logits[at].masked_fill(s.written[at], float("-inf")).argmax())
                self.counts.loop_guards += 1
        s.seen.add(key)
        s.written[torch.arange(n)[write], x[write]] = True
        new = torch.where(write, x, cur).tolist()
        self.counts.deletes += new.count(self.delete)
        self.counts.inserts += new.count(self.split)
        toks, marks = restructure(new, cur.tolist(), s.orig.tolist(), mask, self.delete, self.split)
        s.orig = torch.tensor(marks, dtype=torch.bool)
        self._write(sl, cur.tolist(), toks, ev)
        # the first complete draft: the last block's original masks are gone (later steps edit)
        ev.complete = self._is_last_block() and not any(m and t == mask for m, t in zip(marks, toks, strict=True))
        self.drafted = self.drafted or ev.complete
        if forced:
            self.counts.forced += 1
            return self._end_block(ev)
        if self.block_step >= self.b + c.max_post_edit_steps + 1:
            return self._end_block(ev)
        return ev

    def _write(self, sl: slice, old: list[int], toks: list[int], ev: TokenEvent) -> None:
        mask = self.sp.mask
        for i, (a, t) in enumerate(zip(old, toks, strict=True)):
            if a == t:
                continue
            if a == mask:
                ev.fills.append((sl.start + i, t))
            else:
                ev.edits.append((sl.start + i, a, t))
        self.middle[sl] = torch.tensor(toks, dtype=torch.long)
        self.committed[sl] = self.middle[sl] != mask
        self._find_end()

    def _end_block(self, ev: TokenEvent) -> TokenEvent:
        """The block is done: its leftover masks become blanks (committed, dropped from the
        answer), and the next block starts (or the sequence ends)."""
        blk = self._block()
        left = ~self.committed[blk]
        self.counts.blanks += int(left.sum())
        self.committed[blk] = True
        self._state = None
        self._find_end()
        self._finish_block()
        ev.complete = self.phase == "done"
        self.drafted = self.drafted or ev.complete
        return ev


def policy_for(model: object, preset: str) -> Policy:
    """The policy a preset decodes with on `model`. A model trained for in/del editing (its
    config names the edit tokens: LLaDA2.2) decodes with the in/del rule at the preset's mask
    and edit thresholds (Speedy drafts low and edits, Quality drafts high): the substitution-
    only rules would commit its DELETE and INSERT tokens as text. Any other model: the
    preset's own policy. (SGLang's and the model card's edit threshold is 0; the presets keep
    theirs, a choice not yet measured on a LLaDA2.2 checkpoint: docs/models.md.)"""
    base = make_policy(preset)
    if getattr(model, "edit_tokens", None) is None:
        return base
    cfg = getattr(base, "config", None)
    return InDel(InDelConfig(threshold=float(getattr(cfg, "mask_threshold", InDelConfig.threshold)),
                             edit_threshold=float(getattr(cfg, "edit_threshold", InDelConfig.edit_threshold))))


def make_indel_sequence(model: object, prompt: list[int], policy: InDel, max_new_tokens: int,
                        **kw: object) -> InDelSequence:
    """The in/del decoder for `model`, refused unless its config names both edit tokens."""
    tokens = getattr(model, "edit_tokens", None)
    if tokens is None:
        raise ValueError("the indel policy needs a model trained for insert/delete editing: its config must "
                         "name delete_token_id and split_token_id (LLaDA2.2)")
    c = model.config  # type: ignore[attr-defined]
    if not getattr(model, "aligned_blocks", False):
        raise ValueError("the indel policy needs LLaDA2's aligned block-causal decoding")
    block = kw.pop("block", None) or c.block_size
    return InDelSequence(prompt, c.special, policy, int(block), max_new_tokens, tokens, align=True, **kw)  # type: ignore[arg-type]
