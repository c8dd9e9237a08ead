"""Block-diffusion decoding over an exact KV cache, as small functions (schedule, execute, update).

A `Sequence` is one request's state: its prompt, a middle canvas of [MASK] tokens decoded
block by block, and its cache row. Each forward feeds the clean tokens the cache still
lacks (the prompt, or the block just finished: causal, written for good) together with a
noisy copy of the active block (bidirectional inside the block, reading the clean tokens
before it). `prepare` says what one sequence feeds, `update` applies a policy to the logits (what
a step commits and edits, and where the completion ends: `engine.decoding.commits`) and
returns token events; `engine.decoding.batch.execute` runs one forward for any number of
sequences, and the one step loop (`engine.decoding.scheduler`) drives them.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

import torch
from torch import Tensor

import kernels
from engine.decoding.commits import choose, find_end, is_end
from engine.decoding.constraint import NameConstraint
from engine.decoding.lookup import ContextLookup, agreeing_run
from engine.decoding.loops import loop_bans
from engine.decoding.policies import BlockView, Policy
from engine.decoding.rejections import TooLong
from engine.decoding.steps import Feed, Reason, Staged, StopFn, Tally, TokenEvent, note_forward
from engine.model.native import CLEAN, NOISY, SpecialTokens
from kernels import Confidence

__all__ = ["END_AHEAD_MIN", "Feed", "Reason", "Sequence", "Staged", "StopFn", "Tally", "TokenEvent", "note_forward"]

# the confidence an end-of-middle needs to commit ahead of a mask (engine.decoding.commits.end_in_order);
# above 1: only behind committed tokens; 0: like any token
END_AHEAD_MIN = 1.01


class Sequence:
    """One request's decoding state. Middle index i sits at absolute position P + i.

    `align=True` (LLaDA2.x) puts the diffusion blocks at absolute multiples of `block`: the
    prompt and finished blocks are clean blocks, bidirectional inside (block ids in the
    layout), and the prompt's last partial block is re-fed with the first, shorter middle
    block. Needs unshifted logits. Multi-block edit passes work in both layouts
    (`_prepare_multi`): aligned, they start at the prompt's last partial block, whose keys
    read the first middle block and are rewritten with it.
    """

    def __init__(self, prompt: list[int], special: SpecialTokens, policy: Policy, block: int,
                 max_new_tokens: int, shift: bool, row: int = 0, reused: int = 0,
                 first_allowed: Tensor | None = None, stop_fn: StopFn | None = None,
                 max_len: int = 2048, align: bool = False, end_ahead_min: float | None = None) -> None:
        if not prompt:
            raise ValueError("empty prompt")
        if align and shift:
            raise ValueError("aligned blocks need unshifted logits")
        self.prompt, self.sp, self.policy, self.b, self.shift = prompt, special, policy, block, shift
        self.P = len(prompt)
        self.align = align
        self.lead = self.P % block if align else 0  # prompt tokens inside the first middle block
        self.max_new = max_new_tokens
        self.cap = -(-(max_new_tokens + self.lead) // block) * block - self.lead
        if self.P + 2 * self.cap + 1 > max_len:
            raise TooLong(f"prompt of {self.P} tokens + {self.cap} new exceeds the cache ({max_len})")
        self.middle = torch.full((self.cap,), special.mask, dtype=torch.long)
        self.committed = torch.zeros(self.cap, dtype=torch.bool)
        self.commit_conf = torch.zeros(self.cap)  # the confidence each token was committed with
        self.row = row
        # a full prompt-cache hit still re-feeds the last prompt token for its logits
        self.clean_len = self._reusable(reused)
        self.reused = self.clean_len
        self.block_start = 0  # middle index of the active block
        self.block_step = 0
        self.masked_at_start = block - self.lead
        self.edit_pass = 0  # edit-only passes run on the active block
        self.head: Tensor | None = None  # logits predicting the active block's first token
        self.first_head: Tensor | None = None  # the same for block 0 (multi-block passes)
        self.end: int | None = None  # middle index where the completion ends
        self.first_eom: int | None = None  # the first committed end-of-middle, masks before it or not
        self.reason: Reason | None = None
        self.forwards = 0  # forwards this sequence's row took part in (its event steps)
        self.tally = Tally()  # the request's forwards, shared with its alternatives
        self.multi_pass = 0
        self.phase: Literal["draft", "edit", "multi", "done"] = "draft"
        self.first_allowed, self.stop_fn = first_allowed, stop_fn
        # every token that ends the completion (the format's end of turn, the tokenizer's end of
        # text, ...); the engine widens it after construction (engine.service)
        self.end_ids: frozenset[int] = frozenset({special.end_of_middle})
        # the first step's logits at middle index 0, kept when asked (engine.decoding.alternatives)
        self.keep_first_logits = False
        self.first_logits: Tensor | None = None
        # the first identifier decoded among known names (engine.decoding.constraint), or None
        self.names: NameConstraint | None = None
        self.end_ahead_min = END_AHEAD_MIN if end_ahead_min is None else end_ahead_min
        # a unit may repeat this many times back to back (engine.decoding.loops); 0: no guard
        self.loop_repeats: int = getattr(getattr(policy, "config", None), "loop_repeats", 0)
        # at most this many more commits a step where the model agrees with the context
        # (engine.decoding.lookup); 0: off. Its lookup is built at the first step (end_ids final)
        self.agreement: int = getattr(getattr(policy, "config", None), "context_agreement", 0)
        self.lookup: ContextLookup | None = None
        self.agreed = 0  # tokens committed by context agreement (stats `agreed_tokens`)

    # -- views ---------------------------------------------------------------------------
    def live_limit(self) -> int:
        """Positions below this still belong to the completion. A committed end-of-middle
        ends it even while masks remain before it: the masks after it are dead (as LLaDA
        fills everything after an end-of-text), so a step never spends itself on them."""
        if self.end is not None:
            return self.end
        return self.first_eom + 1 if self.first_eom is not None else self.cap

    def done(self) -> bool:
        return self.phase == "done"

    def final_middle(self) -> list[int]:
        return self.middle[: self.live_limit()].tolist()

    def shown_tokens(self) -> list[int]:
        """The tokens a streamed draft shows: the committed prefix, up to the live limit."""
        unc = (~self.committed).nonzero()
        upto = min(int(unc[0]) if unc.numel() else self.cap, self.live_limit())
        return self.middle[:upto].tolist()

    def _block(self) -> slice:
        if self.align:  # up to the next multiple of b in absolute positions
            return slice(self.block_start, ((self.P + self.block_start) // self.b + 1) * self.b - self.P)
        return slice(self.block_start, self.block_start + self.b)

    def _feed_start(self) -> int:
        """Absolute position of the active block's first fed (noisy) token."""
        s = self.P + self.block_start
        return (s // self.b) * self.b if self.align else s

    def _reusable(self, reused: int) -> int:
        """Cached prompt tokens still valid: all but the logit head when shifted; whole
        blocks before the first middle block when aligned (a block's keys read the block)."""
        n = min(reused, self.P - 1) if self.shift else min(reused, self.P)
        return (min(n, self.P - self.lead) // self.b) * self.b if self.align else n

    # -- schedule ------------------------------------------------------------------------
    def prepare(self) -> Feed:
        """What the next forward feeds for this sequence."""
        P, b = self.P, self.b
        if self.phase == "multi":
            return self._prepare_multi()
        s = self._feed_start()
        ids: list[int] = [*self.prompt, *self.middle.tolist()]
        f = Feed.empty()
        for p in range(self.clean_len, s):
            f.add(ids[p], p, p, CLEAN, (p // b) * b if self.align else -1)
        n_clean = len(f.ids)
        for i in range(b):
            f.add(ids[s + i], s + i, s + i, NOISY, s)
        if self.shift:
            head = [n_clean - 1] if n_clean else []
            f.logits_at = head + list(range(n_clean, n_clean + b - 1))
        else:  # the block's middle positions (aligned: after the prompt's tail)
            f.logits_at = list(range(n_clean + P + self.block_start - s, n_clean + b))
        f.kv_len = s + b
        return f

    def _multi_blocks(self) -> tuple[int, int]:
        """(first absolute position, number of blocks) a multi-block pass rewrites: the blocks
        holding the live middle, from the middle's start (aligned: from the start of the
        prompt's last partial block, `lead` tokens before it)."""
        return self.P - self.lead, -(-(self.lead + self.live_limit()) // self.b)

    def _prepare_multi(self) -> Feed:
        """Clean rewrite of the whole middle and a noisy copy of each of its blocks.

        Each noisy copy reads the clean blocks before it and itself, as the block's own step
        would with the final tokens of the blocks before: a whole-completion edit pass in one
        forward, and the clean rewrite recomputes the earlier blocks' cache entries. Aligned
        (LLaDA2), the clean blocks carry their block ids (bidirectional inside, as the
        prompt's), and the first block's copy includes the prompt's `lead` tail tokens, whose
        rows give no logits."""
        b, lead = self.b, self.lead
        a0, nb = self._multi_blocks()
        ids = [*self.prompt, *self.middle.tolist()]
        f = Feed.empty()
        for p in range(a0, a0 + nb * b):
            f.add(ids[p], p, p, CLEAN, (p // b) * b if self.align else -1)
        base = a0 + nb * b
        for k in range(nb):
            for i in range(b):
                p = a0 + k * b + i
                f.add(ids[p], p, base + k * b + i, NOISY, a0 + k * b)
            if self.shift:
                f.logits_at += ([k * b - 1] if k else []) + [nb * b + k * b + i for i in range(b - 1)]
            else:
                f.logits_at += [nb * b + k * b + i for i in range(b) if k * b + i >= lead]
        f.kv_len = base + nb * b
        return f

    # -- update --------------------------------------------------------------------------
    def update(self, logits: Tensor) -> TokenEvent:
        """Apply the policy to this forward's logits [K, V] (rows as in `logits_at`)."""
        st = self.stage(logits)
        return self.commit(st, kernels.confidence(st.logits, st.current))

    def stage(self, logits: Tensor) -> Staged:
        """The first half of `update`: take the forward, return the logits the policy reads
        (after bans) and the current ids. A caller with many sequences computes the
        confidences of all their staged rows in one call, then `commit`s each."""
        self.forwards += 1
        if self.phase == "multi":
            m = self._multi_blocks()[1] * self.b - self.lead  # the middle positions rewritten
            if self.shift:
                assert self.first_head is not None
                logits = torch.cat([self.first_head[None], logits], 0)
            return self._stage(logits[:m], slice(0, m), edit_only=True, multi=True)
        n_clean_fed = self._feed_start() - self.clean_len
        self.clean_len = self._feed_start()
        if self.shift:
            if n_clean_fed:
                self.head, logits = logits[0], logits[1:]
                if self.block_start == 0:
                    self.first_head = self.head
            assert self.head is not None
            logits = torch.cat([self.head[None], logits], 0)
        return self._stage(logits, self._block(), edit_only=self.phase == "edit", multi=False)

    def commit(self, st: Staged, conf: Confidence) -> TokenEvent:
        """The second half of `update`: the policy's commits and edits from the confidences of
        the staged rows."""
        ev = self._decide(st, conf)
        if st.multi:
            ev.complete = True
            self.multi_pass += 1
            self._after_multi_pass()
            if not ev.edits or self.multi_pass >= self.policy.edit_passes or self.end is None:
                if self.end is None:
                    self.end, self.reason = min(self.cap, self.max_new), "budget"
                self.phase = "done"
        else:
            self._advance(ev)
        return ev

    def _after_multi_pass(self) -> None:
        self.clean_len = self.P - self.lead  # the rewrite is redone each pass

    def _stage(self, logits: Tensor, where: slice, edit_only: bool, multi: bool) -> Staged:
        sl = where
        cur = self.middle[sl]
        masked = ~self.committed[sl]
        first = sl.start == 0
        bans = loop_bans(self.middle.tolist(), self.committed.tolist(), sl.start, sl.start + cur.shape[0],
                         self.loop_repeats) if self.loop_repeats else []
        if bans or (first and (self.first_allowed is not None or self.names is not None)):
            # the writes below go to a copy: the forward's output may be an inference tensor (a
            # view of the batch's logits), which takes no in-place update outside inference
            # mode; a step that writes nothing reads the forward's rows as they are
            logits = logits.clone()
        if self.first_allowed is not None and first:
            logits[0, ~self.first_allowed] = float("-inf")
        if self.names is not None and first:
            logits = self.names.apply(logits, self.middle.tolist(), self.committed.tolist())
        if self.keep_first_logits and first and self.first_logits is None and not edit_only:
            ranked = self.names.first_scores if self.names is not None else None
            self.first_logits = (ranked if ranked is not None else logits[0]).detach().float().cpu().clone()
        for j, t in bans:
            logits[j - sl.start, t] = float("-inf")
        return Staged(logits, torch.where(masked, -1, cur).to(logits.device), sl, edit_only, multi)

    def _decide(self, st: Staged, conf: Confidence) -> TokenEvent:
        sl = st.where
        cur = self.middle[sl]
        n = cur.shape[0]
        idx = torch.arange(sl.start, sl.start + n)
        masked = ~self.committed[sl]
        live = idx < self.live_limit()
        editable = self.committed[sl] & ~is_end(cur, self.end_ids)
        assert conf.cur_prob is not None
        view = BlockView(masked=masked, editable=editable, live=live, current=cur, top_id=conf.top_id.cpu(),
                         top_prob=conf.top_prob.cpu(), cur_prob=conf.cur_prob.cpu(), step=self.block_step,
                         masked_at_start=self.masked_at_start)
        commit, edit = choose(self.policy, view, st, self.sp.mask, self.end_ids, self.end_ahead_min)
        if self.agreement and not st.edit_only:
            commit = self._agreeing(commit, edit, view, sl)
        ev = TokenEvent("edit_pass" if st.edit_only else "step", self.forwards)
        for i in edit.nonzero().flatten().tolist():
            old, new = int(cur[i]), int(view.top_id[i])
            ev.edits.append((sl.start + i, old, new))
        for i in commit.nonzero().flatten().tolist():
            ev.fills.append((sl.start + i, int(view.top_id[i])))
        for j, new in ev.fills:
            self.middle[j], self.committed[j] = new, True
            self.commit_conf[j] = view.top_prob[j - sl.start]
        for j, _, _new in ev.edits:
            self.commit_conf[j] = view.top_prob[j - sl.start]
        for j, _, new in ev.edits:
            self.middle[j] = new
        self.block_step += 1
        self._find_end()
        return ev

    def _agreeing(self, commit: Tensor, edit: Tensor, view: BlockView, sl: slice) -> Tensor:
        """`commit` and the run of masked positions after the committed prefix where the
        model's top token is the context's guess (engine.decoding.lookup)."""
        if self.lookup is None:
            self.lookup = ContextLookup(self.prompt, self.end_ids | set(dataclasses.astuple(self.sp)))
        ids: list[int | None] = [t if c else None for t, c in
                                 zip(self.middle[:sl.stop].tolist(), self.committed[:sl.stop].tolist(), strict=True)]
        for i in (commit | edit).nonzero().flatten().tolist():
            ids[sl.start + i] = int(view.top_id[i])
        out = agreeing_run(commit, view.masked, view.live, view.top_id, ids, self.lookup, self.agreement)
        self.agreed += int(out.sum()) - int(commit.sum())
        return out

    def _find_end(self) -> None:
        """Where the completion ends (`engine.decoding.commits.find_end`); an edit that removed
        the end of middle or the stop rule's cut lets decoding go on."""
        self.first_eom, end, reason = find_end(self.middle.tolist(), self.committed.tolist(), self.end_ids,
                                               self.stop_fn)
        if end is not None:
            self.end, self.reason = end, reason
        elif self.end is not None and self.reason in ("end_of_middle", "stop_rule"):
            self.end, self.reason = None, None  # an edit removed the end: keep going

    def _advance(self, ev: TokenEvent) -> None:
        if self.phase == "draft":
            blk = self._block()
            live = torch.arange(blk.start, blk.stop) < self.live_limit()
            if bool((~self.committed[blk] & live).any()):
                return
            if not self._needs_edit_pass(bool(ev.edits)):
                self._finish_block()
            else:
                self.phase, self.edit_pass = "edit", 0
        elif self.phase == "edit":
            self.edit_pass += 1
            if not ev.edits or self.edit_pass >= self.policy.edit_passes:
                self._finish_block()
        ev.complete = self.phase != "draft" and self._is_last_block()

    def _needs_edit_pass(self, last_step_edited: bool) -> bool:
        if self.policy.edit_passes == 0:
            return False
        check = getattr(self.policy, "needs_edit_pass", None)
        if check is None:
            return True
        blk = self._block()
        live = torch.arange(blk.start, blk.stop) < self.live_limit()
        return bool(check(self.commit_conf[blk][live], last_step_edited))

    def _is_last_block(self) -> bool:
        lim, end = self.live_limit(), self._block().stop
        return lim <= end or end >= self.cap

    def _finish_block(self) -> None:
        if self._is_last_block():
            if self.end is None:
                self.end, self.reason = min(self.cap, self.max_new), "budget"
            if self.end > self.max_new:
                self.end, self.reason = self.max_new, "budget"
            multi = getattr(getattr(self.policy, "config", None), "multi_block", False)
            if multi and self.lead + self.end > self.b and self.policy.edit_passes > 0:
                self.phase, self.multi_pass = "multi", 0
            else:
                self.phase = "done"
            return
        self.block_start = self._block().stop
        self.block_step, self.edit_pass, self.phase = 0, 0, "draft"
        blk = self._block()
        self.masked_at_start = int((torch.arange(blk.start, blk.stop) < self.live_limit()).sum())

    def remask(self, positions: list[int], reused: int) -> None:
        """Send middle `positions` back to [MASK] and resume decoding from the earliest one's
        block. `reused`: clean prompt tokens valid in the cache row (the rest is re-fed)."""
        positions = [p for p in positions if 0 <= p < self.cap]
        for p in positions:
            self.middle[p], self.committed[p] = self.sp.mask, False
        first = min(positions) if positions else max(0, self.live_limit() - 1)
        if self.align:
            self.block_start = max(0, ((first + self.lead) // self.b) * self.b - self.lead)
        else:
            self.block_start = (first // self.b) * self.b
        self.clean_len = self._reusable(reused)
        self.end, self.reason, self.head = None, None, None
        self.phase, self.block_step, self.edit_pass = "draft", 0, 0
        blk = self._block()
        self.masked_at_start = int((~self.committed[blk]).sum())
        self._find_end()

    def finish_event(self, reason: Reason | None = None) -> TokenEvent:
        if reason is not None:
            self.reason, self.phase = reason, "done"
        return TokenEvent("done", self.forwards, complete=True, reason=self.reason, middle=self.final_middle())
