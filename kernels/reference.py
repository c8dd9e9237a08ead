"""PyTorch reference implementations: the specification of every kernel.

Each function here is the ground truth that the Triton kernels are tested against.
They favour clarity over speed (they materialise [N, V] temporaries) and always
accumulate in float32, whatever the input dtype.

Confidence spec (per row ``i`` of ``logits`` [N, V]):

* ``allowed`` (bool [V], optional) masks the vocabulary first: disallowed logits
  are treated as ``-inf``.
* ``top_id``: index of the largest logit; ties go to the lowest index.
* ``top_prob``: ``softmax(row)[top_id]``.
* ``cur_prob``: ``softmax(row)[current_ids[i]]``; 0 when the id is negative
  ("no current token") or not below ``V``.
* ``margin``: top-1 probability minus top-2 probability, where top-2 is the second
  largest logit counting duplicates (so a tie for first place gives margin 0);
  with ``V == 1`` the top-2 probability is 0.
* A row whose logits are all ``-inf`` gives ``top_id`` 0 and 0 for every probability
  (never NaN).

Logits are expected to be finite or ``-inf``; ``+inf`` and NaN are unsupported.
"""

from __future__ import annotations

import torch

NEG_INF = float("-inf")
# (top_id, top_prob, cur_prob, margin): every confidence implementation's result
Tensors = tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor | None]


def check_confidence_args(
    logits: torch.Tensor,
    current_ids: torch.Tensor | None,
    allowed: torch.Tensor | None,
) -> None:
    """Validate shapes and dtypes shared by every confidence implementation."""
    if logits.dim() != 2:
        raise ValueError(f"logits must be [N, V], got shape {tuple(logits.shape)}")
    if logits.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise TypeError(f"logits must be fp32, fp16 or bf16, got {logits.dtype}")
    n, v = logits.shape
    if v == 0:
        raise ValueError("logits must have at least one vocabulary column")
    for name, t, dim, size, dtype in (("current_ids", current_ids, "N", n, torch.int64),
                                      ("allowed", allowed, "V", v, torch.bool)):
        if t is None:
            continue
        if t.shape != (size,):
            raise ValueError(f"{name} must be [{dim}]={size}, got shape {tuple(t.shape)}")
        if t.dtype != dtype:
            raise TypeError(f"{name} must be {str(dtype).removeprefix('torch.')}, got {t.dtype}")
        if t.device != logits.device:
            raise ValueError(f"{name} must be on the same device as logits")


def checked_fp32_logits(
    logits: torch.Tensor, current_ids: torch.Tensor | None, allowed: torch.Tensor | None
) -> torch.Tensor:
    """Validate the arguments; the logits in float32 with disallowed columns at -inf."""
    check_confidence_args(logits, current_ids, allowed)
    x = logits.float()
    return x if allowed is None else x.masked_fill(~allowed, NEG_INF)


def reference_confidence_tensors(logits: torch.Tensor, current_ids: torch.Tensor | None = None, *,
                                 want_margin: bool = False, allowed: torch.Tensor | None = None) -> Tensors:
    """Return ``(top_id, top_prob, cur_prob, margin)`` as specified in the module doc."""
    x = checked_fp32_logits(logits, current_ids, allowed)
    n, v = x.shape

    row_max = x.max(dim=1).values  # [N]; -inf for an all -inf row
    alive = row_max > NEG_INF
    shift = torch.where(alive, row_max, torch.zeros_like(row_max))
    total = torch.exp(x - shift[:, None]).sum(dim=1)  # >= 1 on live rows, 0 on dead ones
    inv_total = torch.where(alive, 1.0 / total.clamp_min(1.0), torch.zeros_like(total))

    # Lowest index among the maxima, spelled out rather than relying on torch.argmax.
    cols = torch.arange(v, device=x.device)
    candidates = torch.where(x == row_max[:, None], cols, v)
    top_id = candidates.min(dim=1).values
    top_id = torch.where(alive, top_id, torch.zeros_like(top_id))
    top_prob = inv_total.clone()  # exp(max - max) / total

    cur_prob: torch.Tensor | None = None
    if current_ids is not None:
        valid = (current_ids >= 0) & (current_ids < v)
        safe_ids = torch.where(valid, current_ids, torch.zeros_like(current_ids))
        cur_logit = x.gather(1, safe_ids[:, None]).squeeze(1)
        cur_prob = torch.exp(cur_logit - shift) * inv_total
        cur_prob = torch.where(valid, cur_prob, torch.zeros_like(cur_prob))

    margin: torch.Tensor | None = None
    if want_margin:
        if v >= 2:
            second = x.topk(2, dim=1).values[:, 1]
        else:
            second = torch.full((n,), NEG_INF, device=x.device)
        margin = (1.0 - torch.exp(second - shift)) * inv_total

    return top_id, top_prob, cur_prob, margin
