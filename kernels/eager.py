"""Fast eager PyTorch confidence: the CPU path of the decoding step.

Same contract as ``kernels.reference`` (which stays the readable specification), in a few
fused library calls instead of [N, V] temporaries: ``max`` (first maximum on ties, as
documented by PyTorch), ``logsumexp`` and a gather. On the CPU this is ~3x faster than
the reference for a 16-row block over a 4k vocabulary, which matters because the daemon
runs it once per sequence per step.
"""

from __future__ import annotations

import torch

from kernels.reference import NEG_INF, Tensors, checked_fp32_logits


def eager_confidence_tensors(logits: torch.Tensor, current_ids: torch.Tensor | None = None, *,
                             want_margin: bool = False, allowed: torch.Tensor | None = None) -> Tensors:
    """Return ``(top_id, top_prob, cur_prob, margin)`` as ``kernels.reference`` specifies."""
    x = checked_fp32_logits(logits, current_ids, allowed)
    top, top_id = x.max(dim=1)
    n, v = x.shape
    alive = top > NEG_INF
    lse = torch.logsumexp(x, dim=1)
    lse = torch.where(alive, lse, torch.zeros_like(lse))
    zero = torch.zeros_like(top)
    top_prob = torch.where(alive, torch.exp(top - lse), zero)
    top_id = torch.where(alive, top_id, torch.zeros_like(top_id))
    cur_prob: torch.Tensor | None = None
    if current_ids is not None:
        valid = (current_ids >= 0) & (current_ids < v) & alive
        safe = torch.where(valid, current_ids, torch.zeros_like(current_ids))
        cur = torch.exp(x.gather(1, safe[:, None]).squeeze(1) - lse)
        cur_prob = torch.where(valid, cur, zero)
    margin: torch.Tensor | None = None
    if want_margin:
        second = x.topk(2, dim=1).values[:, 1] if v >= 2 else torch.full((n,), NEG_INF, device=x.device)
        margin = torch.where(alive, top_prob - torch.exp(second - lse), zero)
    return top_id, top_prob, cur_prob, margin
