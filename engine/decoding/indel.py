"""Levenshtein editing (LLaDA2.2): a block that keeps its length while tokens are inserted and
deleted, on the exact KV cache of `engine.decoding.decode.Sequence`.

The rule is SGLang 0.5.23's `JointThresholdInDel` (the wheel's
`sglang/srt/dllm/algorithm/joint_threshold_indel.py`; docs/models.md, "LLaDA2.2"), step by
step on the active block:

1. x, p: each position's argmax and its probability. The step is counted; once no original
   mask (a mask the block began with) remains it also spends the post-edit budget (never
   given back if an edit brings a mask back).
2. Cleanup round: when the budget is spent (`post_steps >= max_post_edit_steps`; with a
   budget of 0, as soon as no original mask remains) or the step count passes
   `block + max_post_edit_steps`. Otherwise, [MASK] fallback: an original mask whose argmax
   is [MASK] takes its best other token (and that token's probability).
3. M2T: a cleanup round fills every mask; while original masks remain, the masks above
   `threshold` commit if there are at least 1 + (masks created by edits) of them, else the
   surest that many; once none remain, every mask fills at once. (Budget 0: the step that
   fills the last original masks is the cleanup round.)
4. T2T: a generated token whose argmax differs is replaced above `edit_threshold`.
5. Nothing to write: the block is finished. A cleanup round writes no [MASK], DELETE or
   INSERT (each such write takes its best other token). A block state seen before (not in a
   cleanup round): the least confident changing position takes its best token not yet written
   there ([MASK] excluded at an original mask): the anti-loop guard.
6. The writes, then the structural edits, left to right: DELETE drops its position, INSERT
   at i becomes [MASK, the token i held before this step]; the block is cut or padded with
   [MASK] (not original) back to its length, so at most one insertion per gap per step.
   After a cleanup round the block is finished.

So a block always ends clean: no mask, DELETE or INSERT stays on it. SGLang spends one more
forward after a cleanup round that changed the block, to write its KV entries; here those
entries are written by the next block's forward (its clean prefix), so that forward is not
counted as a step of this block.

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
from engine.decoding.lookup import NATIVE_AGREEMENT
from engine.decoding.policies import Policy, make_policy
from engine.decoding.policies.indel import InDel, InDelConfig, indel_config
from engine.decoding.steps import Staged, TokenEvent
from engine.model.native import SpecialTokens, Transformer
from kernels import Confidence


@dataclass
class InDelCounts:
    """What the rule did over a request: the tests and the bench read it."""

    deletes: int = 0
    inserts: int = 0
    loop_guards: int = 0  # steps where the anti-loop guard changed a token
    fallbacks: int = 0  # original masks whose [MASK] argmax took their best other token
    cleanups: int = 0  # blocks finished by a cleanup round (post-edit budget or step cap)


@dataclass
class _Block:
    orig: Tensor  # bool [n]: the position holds one of the masks the block began with
    written: Tensor  # bool [n, V]: (position, token) pairs written before (the loop guard)
    seen: set[tuple[int, ...]] = field(default_factory=set)
    steps: int = 0
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
        with its holes (the masks an insertion or a deletion opened) left out, so an edit
        shows as the insertion or deletion it is, not as a cut of the text after it."""
        if not self.drafted:
            return [t for t in super().shown_tokens() if t != self.sp.mask]
        return self.final_middle()

    def commit(self, st: Staged, conf: Confidence) -> TokenEvent:
        if st.multi or st.edit_only or self.phase != "draft":
            return super().commit(st, conf)
        return self._step(st, conf)

    def _cleanup_due(self, s: _Block, n_orig: int) -> bool:
        c = self.cfg
        if c.max_post_edit_steps > 0 and s.post_steps >= c.max_post_edit_steps:
            return True
        return (c.max_post_edit_steps == 0 and n_orig == 0) or s.steps > self.b + c.max_post_edit_steps

    def _step(self, st: Staged, conf: Confidence) -> TokenEvent:
        """x, p: the step's confidences (`kernels.confidence` over the staged rows, where the
        forward left them); the few rows that need another token read their logits alone."""
        sl, c, logits = st.where, self.cfg, st.logits
        cur = self.middle[sl].clone()
        n, mask = cur.shape[0], self.sp.mask
        if self._state is None:
            self._state = _Block(cur == mask, torch.zeros((n, logits.shape[-1]), dtype=torch.bool))
        s = self._state
        x, p = conf.top_id.cpu().clone(), conf.top_prob.cpu().clone()
        masked = cur == mask
        orig = s.orig & masked
        n_orig, n_mask = int(orig.sum()), int(masked.sum())
        s.steps += 1
        if n_orig == 0:
            s.post_steps += 1
        cleanup = self._cleanup_due(s, n_orig)
        if not cleanup:  # [MASK] fallback at the original masks
            at = orig & (x == mask)
            if bool(at.any()):
                rows = logits[at.to(logits.device)].float()
                alt = rows.clone()
                alt[:, mask] = float("-inf")
                best = alt.argmax(-1)
                x[at] = best.cpu()
                p[at] = rows.softmax(-1).gather(-1, best[:, None])[:, 0].cpu()
                self.counts.fallbacks += int(at.sum())
        fill = self._fill(masked, orig, p, n_orig, n_mask, cleanup)
        if c.max_post_edit_steps == 0 and n_orig > 0 and not bool((orig & ~fill).any()):
            cleanup, fill = True, masked.clone()
        edit = ~masked & (p > c.edit_threshold) & (cur != x)
        write = fill | edit
        ev = TokenEvent("step", self.forwards)
        self.block_step += 1
        if not bool(write.any()):
            return self._end_block(ev)
        if cleanup:  # no [MASK], DELETE or INSERT is written
            bad = write & ((x == mask) | (x == self.delete) | (x == self.split))
            if bool(bad.any()):
                alt = logits[bad.to(logits.device)].float()
                alt[:, [mask, self.delete, self.split]] = float("-inf")
                x[bad] = alt.argmax(-1).cpu()
        key = tuple(cur.tolist())
        if key in s.seen and not cleanup:
            changing = write & (x != cur)
            if bool(changing.any()):
                at_i = int(torch.where(changing, p, float("inf")).argmin())
                row = logits[at_i].float().cpu().masked_fill(s.written[at_i], float("-inf"))
                if bool(orig[at_i]):
                    row[mask] = float("-inf")
                x[at_i] = int(row.argmax())
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
        if cleanup:
            self.counts.cleanups += 1
            return self._end_block(ev)
        return ev

    def _fill(self, masked: Tensor, orig: Tensor, p: Tensor, n_orig: int, n_mask: int, cleanup: bool) -> Tensor:
        """M2T: the masks this step commits (step 3 of the module docstring)."""
        if n_mask == 0 or cleanup or n_orig == 0:
            return masked.clone()
        need = 1 + n_mask - n_orig
        high = masked & (p > self.cfg.threshold)
        if int(high.sum()) >= need:
            return high
        fill = torch.zeros_like(masked)
        fill[torch.where(masked, p, float("-inf")).topk(min(need, n_mask)).indices] = True
        return fill

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
        """The block is done (clean: a cleanup round or a step with nothing to write leaves no
        mask), and the next block starts (or the sequence ends)."""
        self.committed[self._block()] = True
        self._state = None
        self._find_end()
        self._finish_block()
        ev.complete = self.phase == "done"
        self.drafted = self.drafted or ev.complete
        return ev


def policy_for(model: object, preset: str) -> Policy:
    """The policy a preset decodes with on `model`. A model trained for in/del editing (its
    config names the edit tokens: LLaDA2.2) decodes with the in/del rule at the preset's in/del
    configuration (`engine.decoding.policies.indel.indel_config`: Speedy is the published rule,
    Quality differs in its mask threshold only): the substitution-only rules would commit its
    DELETE and INSERT tokens as text. The native model (the embedded checkpoints) decodes with
    context agreement where NATIVE_AGREEMENT says (engine.decoding.lookup; measured on them
    only: a published checkpoint keeps its published rule). Any other model: the preset's own
    policy."""
    if type(model) is Transformer and preset in NATIVE_AGREEMENT:
        return make_policy(preset, context_agreement=NATIVE_AGREEMENT[preset])
    base = make_policy(preset)
    if getattr(model, "edit_tokens", None) is None or isinstance(base, InDel):
        return base
    return InDel(indel_config(preset))


def check_routing_block(model: object, block: int) -> None:
    """Refuse a decoder block other than a block-routed model's routing block: each forward
    routes the tokens of one aligned `block_size` block together, so another decoder block
    would route the blocks differently from the checkpoint (as SGLang refuses it)."""
    routing = getattr(model, "routing_block", None)
    if routing is not None and block != routing:
        raise ValueError(f"LLaDA2.2 block routing needs the decoder block to be the checkpoint's block_size "
                         f"({routing}), got {block}: leave the block unset")


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
    block = int(kw.pop("block", None) or c.block_size)  # type: ignore[arg-type]
    check_routing_block(model, block)
    return InDelSequence(prompt, c.special, policy, block, max_new_tokens, tokens, align=True, **kw)  # type: ignore[arg-type]
