"""Routed-expert compute of a mixture-of-experts layer: the spec, an eager path, the dispatch.

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
  batched matmul per chunk of pairs; obviously right, wasteful for many pairs.
* ``eager_moe``: pairs sorted by expert, then two ``torch.nn.functional.grouped_mm`` calls
  (torch >= 2.9: CUTLASS grouped GEMM on CUDA sm90 in bf16, a fallback loop on the CPU).
* ``moe_experts``: the dispatch (``LLADA_KERNELS`` as in ``kernels``): Triton on CUDA
  (``kernels.moe``), ``eager_moe`` elsewhere; ``backend=`` overrides it per call.
* ``route_tiles``: the tile schedule the Triton kernel reads (pairs sorted by expert, cut
  into tiles of ``block_m`` pairs of one expert), built on the device.
* ``route_groups`` / ``block_allowed``: LLaDA2.2's block routing (the experts a 32-token block
  may use: its ``expert_capacity`` best by the block's maximum score), before the top-k. The
  three backends above take the routed ids whatever chose them.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

MOE_BACKENDS = ("auto", "triton", "grouped", "reference")
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


def block_allowed(choice: Tensor, groups: Tensor, capacity: int) -> Tensor:
    """bool [N, E]: the experts each token may use under block routing (LLaDA2.2).

    ``choice`` [N, E] float32 are the selection scores (sigmoid + expert bias); each group's
    score of an expert is its maximum over the group's tokens, and the ``capacity`` best
    experts of the group are allowed to every token in it. Groups are ids < N (as
    ``route_groups`` gives); the [N, E] scratch is a bound fixed by shapes (no host sync)."""
    n, e = choice.shape
    idx = groups[:, None].expand(-1, e)
    gmax = torch.full((n, e), float("-inf"), dtype=choice.dtype, device=choice.device)
    gmax.scatter_reduce_(0, idx, choice, reduce="amax", include_self=True)
    top = gmax.topk(min(capacity, e), dim=-1).indices
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


def sort_pairs(ids: Tensor, n_experts: int) -> tuple[Tensor, Tensor]:
    """(pair indices sorted by expert (stable), per-expert pair counts int32 [E]), on the device.

    A pair is ``token * k + slot``. Counting by ``scatter_add_`` rather than ``bincount``:
    CUDA's bincount reads the maximum back to size its output, a host sync."""
    flat = ids.reshape(-1)
    order = torch.argsort(flat, stable=True)
    counts = torch.zeros(n_experts, dtype=torch.int32, device=ids.device)
    counts.scatter_add_(0, flat, torch.ones_like(flat, dtype=torch.int32))
    return order, counts


def _grouped_mm() -> Callable[..., Tensor]:
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
    grouped_mm = _grouped_mm()
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


@dataclass(frozen=True)
class Tiles:
    """The Triton kernel's schedule: tile t covers sorted pairs [begin[t], end[t]) of expert
    expert[t] (-1: an unused tile; the grid has an upper bound of tiles, fixed by shapes)."""

    order: Tensor  # int32 [M]: pair indices sorted by expert
    expert: Tensor  # int32 [T]
    begin: Tensor  # int32 [T]
    end: Tensor  # int32 [T]


def max_tiles(pairs: int, n_experts: int, block_m: int) -> int:
    """An upper bound of sum_e ceil(count_e / block_m) given sum_e count_e = pairs."""
    return -(-pairs // block_m) + min(n_experts, pairs)


def route_tiles(ids: Tensor, n_experts: int, block_m: int) -> Tiles:
    """Cut the pairs, sorted by expert, into tiles of at most ``block_m`` pairs of one expert;
    every tensor op stays on the device (no host sync), the tile count is a shape bound."""
    order, counts = sort_pairs(ids, n_experts)
    counts = counts.long()
    n_tiles = (counts + block_m - 1) // block_m
    tiles_to = n_tiles.cumsum(0)  # exclusive end of each expert's tiles
    pairs_from = counts.cumsum(0) - counts
    t = torch.arange(max_tiles(ids.numel(), n_experts, block_m), device=ids.device)
    e = torch.searchsorted(tiles_to, t, right=True)
    used = e < n_experts
    ec = e.clamp(max=n_experts - 1)
    begin = pairs_from[ec] + (t - (tiles_to[ec] - n_tiles[ec])) * block_m
    end = torch.minimum(begin + block_m, pairs_from[ec] + counts[ec])
    expert = torch.where(used, ec, -1)
    begin, end = torch.where(used, begin, 0), torch.where(used, end, 0)
    return Tiles(order.int(), expert.int(), begin.int(), end.int())


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


def _requested() -> str:
    mode = os.environ.get("LLADA_KERNELS", "auto").strip().lower() or "auto"
    return {"eager": "grouped"}.get(mode, mode)


def moe_backend_name(x: Tensor, backend: str | None = None) -> str:
    """The backend ``moe_experts`` would use: "triton", "grouped" or "reference"."""
    mode = backend or _requested()
    if mode not in MOE_BACKENDS:
        raise ValueError(f"MoE backend {mode!r}: expected one of {', '.join(MOE_BACKENDS)}")
    if mode != "auto":
        return mode
    if x.is_cuda and triton_importable():
        return "triton"
    return "grouped" if grouped_mm_supported(x) else "reference"


def triton_importable() -> bool:
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


def moe_experts(x: Tensor, w13: Tensor, w2: Tensor, ids: Tensor, weights: Tensor, *,
                backend: str | None = None) -> Tensor:
    """The routed experts' float32 output [N, D] (see the module docstring), on the backend
    ``moe_backend_name`` picks: Triton on CUDA, grouped GEMMs elsewhere."""
    name = moe_backend_name(x, backend)
    if name == "triton":
        from kernels import moe as triton_moe  # imported on first use: needs Triton

        return triton_moe.triton_moe(x, w13, w2, ids, weights)
    if name == "grouped":
        return eager_moe(x, w13, w2, ids, weights)
    return reference_moe(x, w13, w2, ids, weights)
