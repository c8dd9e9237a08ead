"""Routed-expert compute of a mixture-of-experts layer: the spec (reference), and block routing.

Every function here computes, for tokens ``x`` [N, D] routed to ``ids`` [N, k] experts with
weights ``weights`` [N, k] (float32), over stacked expert weights

* ``w13`` [E, 2I, D]: each expert's gate projection (rows ``:I``) over its up projection
  (rows ``I:``), as ``nn.Linear`` weights (out x in),
* ``w2`` [E, D, I]: each expert's down projection,

the float32 sum ``y[n] = sum_j weights[n, j] * down_e(silu(gate_e(x[n])) * up_e(x[n]))`` with
``e = ids[n, j]``. The expert matmuls run in the dtype of ``x`` (as ``nn.Linear`` would), the
weighted sum in float32. None of them reads a value back to the host: the work depends on
the routing only through tensors, so a GPU step never waits for the CPU.

* ``reference_moe``: the spec. Gathers each (token, expert) pair's weights and runs one
  batched matmul per chunk of pairs; obviously right, wasteful for many pairs. The eager
  path is ``kernels.moe_eager``, the Triton kernel ``kernels.moe``, and ``kernels.moe_experts``
  dispatches between the three (``kernels.dispatch``).
* ``route_groups`` / ``block_allowed``: LLaDA2.2's block routing (the experts a 32-token block
  may use: its ``expert_capacity`` best by the block's maximum score), before the top-k. The
  three implementations take the routed ids whatever chose them.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

_GATHER_BYTES = 64 << 20  # reference: gathered weights per chunk of pairs


def check_moe_args(x: Tensor, w13: Tensor, w2: Tensor, ids: Tensor, weights: Tensor) -> None:
    """Raise ValueError unless the shapes agree (see the module docstring)."""
    if x.dim() != 2 or w13.dim() != 3 or w2.dim() != 3:
        raise ValueError(f"x [N, D], w13 [E, 2I, D], w2 [E, D, I]; got {x.shape}, {w13.shape}, {w2.shape}")
    e, two_i, d = w13.shape
    if two_i % 2 or d != x.shape[1] or tuple(w2.shape) != (e, d, two_i // 2):
        raise ValueError(f"inconsistent shapes x {tuple(x.shape)}, w13 {tuple(w13.shape)}, w2 {tuple(w2.shape)}")
    if ids.dim() != 2 or ids.shape[0] != x.shape[0] or tuple(weights.shape) != tuple(ids.shape):
        raise ValueError(f"ids and weights must be [N, k] with N = {x.shape[0]}; got {ids.shape}, {weights.shape}")


def reference_moe(x: Tensor, w13: Tensor, w2: Tensor, ids: Tensor, weights: Tensor) -> Tensor:
    """The spec: per (token, expert) pair, its own expert's weights, gathered; float32 [N, D]."""
    check_moe_args(x, w13, w2, ids, weights)
    n, k = ids.shape
    inter = w13.shape[1] // 2
    pairs = n * k
    flat, tok = ids.reshape(-1), torch.arange(pairs, device=x.device) // max(k, 1)
    per_pair = (w13[0].numel() + w2[0].numel()) * w13.element_size()
    step = max(1, _GATHER_BYTES // max(per_pair, 1))
    out = torch.zeros((pairs, x.shape[1]), dtype=torch.float32, device=x.device)
    for a in range(0, pairs, step):
        e, xs = flat[a:a + step], x[tok[a:a + step], None, :]  # [P, 1, D]
        gu = torch.bmm(xs, w13[e].transpose(1, 2))  # [P, 1, 2I]
        h = F.silu(gu[..., :inter]) * gu[..., inter:]
        out[a:a + step] = torch.bmm(h, w2[e].transpose(1, 2))[:, 0].float()
    out *= weights.reshape(-1, 1).float()
    return out.view(n, k, x.shape[1]).sum(1)


def route_groups(pos: Tensor, block: int) -> Tensor:
    """Block routing's groups: int64 [B*T] ids over the flattened tokens of ``pos`` [B, T].

    A group is a run of consecutive tokens of one row at consecutive positions inside one
    aligned window [k*block, (k+1)*block): a new group starts at a row's start, where the
    position does not follow the one before (a noisy copy after the clean blocks, padding),
    or where it crosses a multiple of ``block``. A whole fed block is one group, a partial
    one routes over the tokens present (as SGLang's block top-k does for a partial final
    block), and padding never joins a real block. On the device, no host sync."""
    b, t = pos.shape
    new = torch.ones((b, t), dtype=torch.bool, device=pos.device)
    if t > 1:
        prev, cur = pos[:, :-1], pos[:, 1:]
        new[:, 1:] = (cur != prev + 1) | (cur // block != prev // block)
    return new.reshape(-1).long().cumsum(0) - 1


def topk_lowest(x: Tensor, k: int) -> Tensor:
    """int64 [..., k]: the indices of the ``k`` largest of ``x`` along its last dimension, best
    first, equal values in ascending index order: block routing's tie rule, SGLang 0.5.23's
    (`models/llada2.py`: the block's capacity cut keeps tied experts by ascending id, and each
    token's top-k takes the leftmost of equal scores). ``torch.topk`` promises no order."""
    return torch.sort(x, dim=-1, descending=True, stable=True).indices[..., :k]


def block_allowed(choice: Tensor, groups: Tensor, capacity: int) -> Tensor:
    """bool [N, E]: the experts each token may use under block routing (LLaDA2.2).

    ``choice`` [N, E] float32 are the selection scores (sigmoid + expert bias); each group's
    score of an expert is its maximum over the group's tokens, and the ``capacity`` best
    experts of the group are allowed to every token in it, ties at the cut to the lower id
    (``topk_lowest``). Groups are ids < N (as ``route_groups`` gives); the [N, E] scratch is
    a bound fixed by shapes (no host sync)."""
    n, e = choice.shape
    idx = groups[:, None].expand(-1, e)
    gmax = torch.full((n, e), float("-inf"), dtype=choice.dtype, device=choice.device)
    gmax.scatter_reduce_(0, idx, choice, reduce="amax", include_self=True)
    top = topk_lowest(gmax, min(capacity, e))
    allowed = torch.zeros((n, e), dtype=torch.bool, device=choice.device)
    allowed.scatter_(1, top, True)
    return allowed[groups]


def experts_read(ids: Tensor, groups: Tensor, n_experts: int) -> Tensor:
    """int64 [G]: distinct experts each group's tokens touch (``ids`` [N, k]); a GEMM over
    the group reads those experts' weights once (the bytes bench/gpu_llada2.py reports)."""
    g = int(groups.max()) + 1 if groups.numel() else 0
    hit = torch.zeros((g, n_experts), dtype=torch.bool, device=ids.device)
    hit[groups[:, None].expand_as(ids).reshape(-1), ids.reshape(-1)] = True
    return hit.sum(-1)
