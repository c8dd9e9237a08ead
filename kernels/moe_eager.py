"""The fast eager PyTorch path of the routed-expert compute (spec: ``kernels.moe_reference``).

``eager_moe`` sorts the (token, expert) pairs by expert and runs two grouped GEMMs
(``torch.nn.functional.grouped_mm``, torch >= 2.9: CUTLASS grouped GEMM on CUDA sm90 in bf16,
a fallback loop on the CPU). Nothing is read back to the host. ``sort_pairs`` is also the
first step of the Triton kernel's schedule (``kernels.moe.route_tiles``).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from kernels.moe_reference import check_moe_args


def sort_pairs(ids: Tensor, n_experts: int) -> tuple[Tensor, Tensor]:
    """(pair indices sorted by expert (stable), per-expert pair counts int32 [E]), on the device.

    A pair is ``token * k + slot``. Counting by ``scatter_add_`` rather than ``bincount``:
    CUDA's bincount reads the maximum back to size its output, a host sync."""
    flat = ids.reshape(-1)
    order = torch.argsort(flat, stable=True)
    counts = torch.zeros(n_experts, dtype=torch.int32, device=ids.device)
    counts.scatter_add_(0, flat, torch.ones_like(flat, dtype=torch.int32))
    return order, counts


def grouped_mm_fn() -> Callable[..., Tensor]:
    """torch's grouped GEMM: public as ``F.grouped_mm`` from torch 2.10, ``torch._grouped_mm``
    before; RuntimeError on a torch without either."""
    fn = getattr(F, "grouped_mm", None) or getattr(torch, "_grouped_mm", None)
    if fn is None:
        raise RuntimeError(f"torch {torch.__version__} has no grouped_mm (the grouped MoE path)")
    return fn


def eager_moe(x: Tensor, w13: Tensor, w2: Tensor, ids: Tensor, weights: Tensor) -> Tensor:
    """Pairs sorted by expert, two grouped GEMMs (``F.grouped_mm``); float32 [N, D]."""
    check_moe_args(x, w13, w2, ids, weights)
    n, k = ids.shape
    inter = w13.shape[1] // 2
    if n * k == 0:
        return torch.zeros((n, x.shape[1]), dtype=torch.float32, device=x.device)
    grouped_mm = grouped_mm_fn()
    order, counts = sort_pairs(ids, w13.shape[0])
    offs = counts.cumsum(0, dtype=torch.int32)
    xs = x[order // max(k, 1)]  # [M, D], grouped by expert
    gu = grouped_mm(xs, w13.transpose(1, 2), offs=offs)  # [M, 2I]
    h = F.silu(gu[:, :inter]) * gu[:, inter:]
    ys = grouped_mm(h.contiguous(), w2.transpose(1, 2), offs=offs).float()  # [M, D]
    ys *= weights.reshape(-1)[order, None].float()
    pairs = torch.empty_like(ys)
    pairs[order] = ys  # back to (token, slot) order; the sum over slots is deterministic
    return pairs.view(n, k, x.shape[1]).sum(1)


def grouped_mm_supported(x: Tensor) -> bool:
    """Whether ``F.grouped_mm`` takes these inputs: the CPU fallback (any float dtype) or
    CUDA sm80+ in bfloat16."""
    if getattr(F, "grouped_mm", None) is None and getattr(torch, "_grouped_mm", None) is None:
        return False
    if x.device.type == "cpu":
        return True
    if x.device.type != "cuda" or x.dtype != torch.bfloat16:
        return False
    return torch.cuda.get_device_capability(x.device) >= (8, 0)
