"""Fused mixture-of-experts expert compute in Triton: two grouped GEMMs over routed pairs.

Spec: ``kernels.moe_reference.reference_moe``. For tokens ``x`` [N, D] routed to ``ids`` [N, k]
with float32 ``weights`` [N, k], over stacked ``w13`` [E, 2I, D] (gate rows over up rows) and
``w2`` [E, D, I], it returns float32 [N, D].

The (token, expert) pairs are sorted by expert on the device and cut into tiles of at most
``BLOCK_M`` pairs of one expert (``route_tiles``, built with torch ops); the grid is an
upper bound of tiles fixed by the shapes, and programs on an unused tile return at once,
so nothing is read back to the host (the schedule of vLLM's fused_moe / moe_align_block_size).

1. ``_moe_gemm_kernel`` with ``GATED``: per tile and ``BLOCK_N`` columns of the
   intermediate size, the tile's token rows of ``x`` are gathered and multiplied by the
   expert's gate and up rows at once; ``silu(gate) * up`` goes to ``h`` [M, I] at the pair's
   row (M = N k).
2. The same kernel without ``GATED``: ``h`` times the expert's down projection, scaled by
   the pair's routing weight, to ``y`` [M, D] (float32) at the pair's row.

Then ``y.view(N, k, D).sum(1)``: no atomics, so the result is deterministic. Each expert's
weights are read once per tile, so a step reads about the weights of the experts its tokens
touch (the bound that bench/gpu_llada2.py reports).

Interpreter: as in ``kernels.confidence``, set ``TRITON_INTERPRET=1`` before importing this
module to run the kernel on CPU tensors (``INTERPRETED`` records which was built).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl
from torch import Tensor

from kernels.moe_eager import sort_pairs
from kernels.moe_reference import check_moe_args

INTERPRETED: bool = bool(triton.knobs.runtime.interpret)


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


@triton.jit
def _moe_gemm_kernel(
    a_ptr, b_ptr, c_ptr, scale_ptr,
    order_ptr, tile_expert_ptr, tile_begin_ptr, tile_end_ptr,
    n_out, n_in, a_div,
    stride_am, stride_be, stride_bn, stride_cm,
    GATED: tl.constexpr, SCALED: tl.constexpr, IEEE: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    """C[p, n] = A[p // a_div] . B[e, n] for the pairs p of one tile (expert e). GATED: B holds
    gate rows over up rows (up = gate + n_out rows), C = silu(A . gate) * (A . up). SCALED:
    times scale[p]. B's last dimension is contiguous."""
    tile = tl.program_id(0)
    expert = tl.load(tile_expert_ptr + tile)
    if expert < 0:
        return
    begin = tl.load(tile_begin_ptr + tile)
    end = tl.load(tile_end_ptr + tile)
    sorted_at = begin + tl.arange(0, BLOCK_M)
    m_ok = sorted_at < end
    pair = tl.load(order_ptr + sorted_at, mask=m_ok, other=0).to(tl.int64)
    a_row = pair // a_div
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    n_ok = cols < n_out
    b_base = b_ptr + expert.to(tl.int64) * stride_be
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    acc_up = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k0 in range(0, n_in, BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        k_ok = ks < n_in
        a = tl.load(a_ptr + a_row[:, None] * stride_am + ks[None, :], mask=m_ok[:, None] & k_ok[None, :], other=0.0)
        b_at = b_base + cols[None, :] * stride_bn + ks[:, None]  # [BLOCK_K, BLOCK_N]
        b_ok = k_ok[:, None] & n_ok[None, :]
        b = tl.load(b_at, mask=b_ok, other=0.0)
        if IEEE:
            acc += tl.dot(a, b, input_precision="ieee")
        else:
            acc += tl.dot(a, b)
        if GATED:
            bu = tl.load(b_at + n_out * stride_bn, mask=b_ok, other=0.0)
            if IEEE:
                acc_up += tl.dot(a, bu, input_precision="ieee")
            else:
                acc_up += tl.dot(a, bu)
    if GATED:
        acc = acc * tl.sigmoid(acc) * acc_up
    if SCALED:
        acc = acc * tl.load(scale_ptr + pair, mask=m_ok, other=0.0)[:, None]
    c_at = c_ptr + pair[:, None] * stride_cm + cols[None, :]
    tl.store(c_at, acc.to(c_ptr.dtype.element_ty), mask=m_ok[:, None] & n_ok[None, :])


def pick_blocks(d: int, inter: int) -> tuple[int, int, int]:
    """(BLOCK_M, BLOCK_N, BLOCK_K): 16 pairs a tile (decode steps route few tokens to each
    expert), 64 output columns, 64-128 along the reduction (not past the next power of 2)."""
    block_k = max(16, min(128, triton.next_power_of_2(min(d, inter))))
    return 16, 64, block_k


def _launch(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, scale: torch.Tensor, tiles, n_out: int,
            a_div: int, gated: bool, blocks: tuple[int, int, int]) -> None:
    bm, bn, bk = blocks
    grid = (tiles.expert.numel(), triton.cdiv(n_out, bn))
    _moe_gemm_kernel[grid](
        a, b, c, scale, tiles.order, tiles.expert, tiles.begin, tiles.end,
        n_out, a.shape[1], a_div, a.stride(0), b.stride(0), b.stride(1), c.stride(0),
        GATED=gated, SCALED=not gated, IEEE=a.dtype == torch.float32,
        BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, num_warps=4,
    )


def triton_moe(x: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor,
               blocks: tuple[int, int, int] | None = None) -> torch.Tensor:
    """The routed experts' float32 output [N, D]; ``blocks`` overrides (BLOCK_M, BLOCK_N,
    BLOCK_K) (tests use it to cover several tiles an expert on small inputs)."""
    check_moe_args(x, w13, w2, ids, weights)
    if x.device.type != "cuda" and not INTERPRETED:
        raise RuntimeError("the Triton MoE kernel needs CUDA tensors, or TRITON_INTERPRET=1 set before "
                           "kernels.moe is imported")
    n, k = ids.shape
    e, two_i, d = w13.shape
    inter = two_i // 2
    out = torch.zeros((n, d), dtype=torch.float32, device=x.device)
    if n == 0 or k == 0:
        return out
    x, w13, w2 = x.contiguous(), w13.contiguous(), w2.contiguous()
    blocks = blocks or pick_blocks(d, inter)
    tiles = route_tiles(ids, e, blocks[0])
    scale = weights.reshape(-1).float().contiguous()
    h = torch.empty((n * k, inter), dtype=x.dtype, device=x.device)
    _launch(x, w13, h, scale, tiles, inter, k, True, blocks)
    y = torch.empty((n * k, d), dtype=torch.float32, device=x.device)
    _launch(h, w2, y, scale, tiles, d, 1, False, blocks)
    return y.view(n, k, d).sum(1)
