"""What one decoding step commits: the rules between a policy's decision and the canvas.

A `Sequence` (`engine.decoding.decode`) stages a forward's logits and reads their confidences
over the active block (a `BlockView`); these functions turn the policy's decision into the
positions that commit (M2T: a masked position takes its top token) and those that are edited
(T2T: a committed token replaced by the model's top one), and find where the completion ends:

- `choose`: the policy's commits and edits kept to live positions, an end-of-middle held back
  until the tokens before it are committed (`end_in_order`), [MASK] never taken as an answer,
  and at least one commit a step (`progress`);
- `find_end`: the first committed end-of-middle with no mask before it, or where the stop
  rule cuts the committed prefix.

The `Sequence` applies what they return to its canvas; they change nothing of it, except the
`BlockView`'s top tokens that `progress` replaces where every candidate's top is [MASK].
"""

from __future__ import annotations

import torch
from torch import Tensor

import kernels
from engine.decoding.policies import BlockView, Policy
from engine.decoding.steps import Reason, Staged, StopFn


def is_end(ids: Tensor, end_ids: frozenset[int]) -> Tensor:
    """Where `ids` hold a token that ends the completion (one of `end_ids`)."""
    if len(end_ids) == 1:
        return ids == next(iter(end_ids))
    return torch.isin(ids, torch.tensor(sorted(end_ids), dtype=ids.dtype, device=ids.device))


def choose(policy: Policy, view: BlockView, st: Staged, mask: int, end_ids: frozenset[int],
           end_ahead_min: float) -> tuple[Tensor, Tensor]:
    """(commit, edit): the staged rows that take their top token this step, as fills of masked
    positions and as edits of committed ones. An edit-only pass (`st.edit_only`) commits
    nothing; a draft step commits at least one position."""
    masked, live = view.masked, view.live
    if st.edit_only:
        commit, edit = masked & False, policy.edit_only(view)
    else:
        d = policy.decide(view)
        commit, edit = d.commit & masked & live, d.edit & view.editable & live
        if end_ahead_min > 0:
            commit = end_in_order(commit, masked & live, view.top_id, view.top_prob, end_ids, end_ahead_min)
    # [MASK] is the canvas's blank, never an answer: a row whose top token is the mask id
    # stays masked, as in the published decoders (the confidences keep its mass)
    real = view.top_id != mask
    edit = edit & real
    if not st.edit_only:
        commit = progress(commit & real, masked & live, view, st, mask)
    return commit, edit


def progress(commit: Tensor, cand: Tensor, view: BlockView, st: Staged, mask: int) -> Tensor:
    """A step never stalls: with no commit left, the surest candidate whose top token is
    real commits; where every candidate's top is [MASK] (an untrained or broken model),
    the surest one commits its best token other than [MASK] (written into `view`)."""
    if bool(commit.any()) or not bool(cand.any()):
        return commit
    real = cand & (view.top_id != mask)
    if not bool(real.any()):
        banned = st.logits.clone()
        banned[:, mask] = float("-inf")
        alt = kernels.confidence(banned, st.current)
        view.top_id[cand], view.top_prob[cand] = alt.top_id.cpu()[cand], alt.top_prob.cpu()[cand]
        real = cand
    out = commit.clone()
    out[int(torch.where(real, view.top_prob, -1.0).argmax())] = True
    return out


def end_in_order(commit: Tensor, cand: Tensor, top: Tensor, prob: Tensor, end_ids: frozenset[int],
                 end_ahead_min: float) -> Tensor:
    """Drop the end-of-middle commits that would leave a mask before them, unless their
    confidence reaches `end_ahead_min`. A committed end-of-middle ends the completion, and
    the padding after a short middle is what a small model is surest of: committed out of
    order, it cuts an unfinished answer short. Otherwise it commits once everything before
    it is (or is now) committed; if that leaves no commit, the leftmost candidate commits,
    whatever its token, so a step never stalls."""
    pending = cand & ~commit
    before = torch.cumsum(pending.int(), 0) - pending.int()
    ahead = is_end(top, end_ids) & (before > 0) & (prob < end_ahead_min)
    out = commit & ~ahead
    if not bool(out.any()) and bool(cand.any()):
        out[int(cand.nonzero()[0])] = True
    return out


def find_end(middle: list[int], committed: list[bool], end_ids: frozenset[int],
             stop_fn: StopFn | None) -> tuple[int | None, int | None, Reason | None]:
    """(first_eom, end, reason) of a canvas: the first committed end-of-middle, masks before it
    or not; and where the completion ends (None: not yet), at the first committed end-of-middle
    with no mask before it or where the stop rule cuts the committed prefix, whichever is first.
    Plain lists: a few dozen positions, where each small tensor op costs more than the scan."""
    first_eom = next((i for i, (t, c) in enumerate(zip(middle, committed, strict=True)) if c and t in end_ids), None)
    first_mask = next((i for i, c in enumerate(committed) if not c), len(committed))
    prefix = middle[:first_mask]
    end: int | None = None
    reason: Reason | None = None
    at = next((i for i, t in enumerate(prefix) if t in end_ids), None)
    if at is not None:
        end, reason = at, "end_of_middle"
    if stop_fn is not None:
        cut = stop_fn(prefix[: end if end is not None else first_mask])
        if cut is not None and (end is None or cut < end):
            end, reason = cut, "stop_rule"
    return first_eom, end, reason
