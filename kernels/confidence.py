"""Fused confidence over the vocabulary: one pass over [N, V] logits, no softmax tensor.

Spec: ``kernels.reference.reference_confidence_tensors``. Per row this computes the
argmax (lowest index on ties), its softmax probability, the probability of a given
"current" token id, and optionally the top-1 minus top-2 probability margin.

Two launches, as in split-K / flash-decoding:

1. ``_partials_kernel``, grid ``(N, chunks)``: each program streams one chunk of the
   vocabulary in ``BLOCK_V`` tiles. It keeps an online softmax (a running max over the
   chunk and per-lane sums of ``exp(x - max)``: one exp per element) and, per lane, the
   max, the first index of it and the runner-up; then it folds its lanes into one
   partial record (max, sum, index, second largest) per (row, chunk).
2. ``_finish_kernel``, grid ``(N,)``: folds a row's partial records, loads the current
   token's logit directly (one scalar load), and writes the outputs.

Splitting the vocabulary into chunks keeps the GPU busy when there are few rows (a
32-position block); with many rows there is one chunk per row.

The ``allowed`` vocabulary mask is supported natively (a uint8 view of the bool mask is
read alongside each tile), so the dispatch never needs to fall back for token healing.

Interpreter: whether ``triton.jit`` builds a compiled or an interpreted kernel is decided
when this module is imported, so set ``TRITON_INTERPRET=1`` *before* importing it to run
the kernels on CPU tensors (``INTERPRETED`` records which one was built).
"""

from __future__ import annotations

import functools
import math

import torch
import triton
import triton.language as tl

from kernels.reference import check_confidence_args

INTERPRETED: bool = bool(triton.knobs.runtime.interpret)
_NO_INDEX: tl.constexpr = tl.constexpr(2**31 - 1)  # "no index yet"; loses every min


@triton.jit
def _top2(m, idx, m2, size: tl.constexpr):
    """Fold ``size`` max records into one.

    Record ``k`` holds a max ``m[k]``, the lowest index ``idx[k]`` where it occurs and
    the second largest value ``m2[k]`` (counting duplicates). Returns the max, its
    lowest index and the second largest value of the union.
    """
    big = tl.max(m, axis=0)
    first = tl.min(tl.where(m == big, idx, _NO_INDEX), axis=0)
    # Second largest of the union: the runner-up inside the record holding the max,
    # or the best value of any other record.
    lane = tl.arange(0, size)
    holder = tl.min(tl.where(m == big, lane, size), axis=0)
    others = tl.max(tl.where(lane == holder, float("-inf"), m), axis=0)
    second = tl.maximum(tl.max(m2, axis=0), others)
    return big, first, second


@triton.jit
def _partials_kernel(
    logits_ptr,
    allowed_ptr,
    part_m_ptr,
    part_s_ptr,
    part_i_ptr,
    part_m2_ptr,
    n_cols,
    row_stride,
    chunk_cols,
    n_chunks,
    HAS_ALLOWED: tl.constexpr,
    BLOCK_V: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    chunk = tl.program_id(1)
    lanes = tl.arange(0, BLOCK_V)
    row_ptr = logits_ptr + row * row_stride
    chunk_start = chunk * chunk_cols

    # Per lane: max, first index of it, runner-up (no exp needed). For the sum, one
    # running max for the whole chunk, so each element costs a single exp.
    lane_max = tl.full([BLOCK_V], float("-inf"), tl.float32)
    lane_m2 = tl.full([BLOCK_V], float("-inf"), tl.float32)
    lane_idx = tl.full([BLOCK_V], _NO_INDEX, tl.int32)
    run_max = tl.max(lane_max, axis=0)
    s = tl.zeros([BLOCK_V], tl.float32)  # sum of exp(x - run_max), per lane
    for off in range(0, chunk_cols, BLOCK_V):
        cols = chunk_start + off + lanes
        inside = cols < n_cols
        x = tl.load(row_ptr + cols, mask=inside, other=float("-inf")).to(tl.float32)
        if HAS_ALLOWED:
            ok = tl.load(allowed_ptr + cols, mask=inside, other=0)
            x = tl.where(ok != 0, x, float("-inf"))
        lane_m2 = tl.maximum(lane_m2, tl.minimum(lane_max, x))
        # Tiles arrive in increasing column order: a strict improvement keeps the
        # first occurrence of each lane's maximum.
        lane_idx = tl.where(x > lane_max, cols, lane_idx)
        lane_max = tl.maximum(lane_max, x)
        new_max = tl.maximum(run_max, tl.max(x, axis=0))
        shift = tl.where(new_max == float("-inf"), 0.0, new_max)
        s = s * tl.exp(run_max - shift) + tl.exp(x - shift)
        run_max = new_max

    big, first, second = _top2(lane_max, lane_idx, lane_m2, BLOCK_V)
    out = row * n_chunks + chunk
    tl.store(part_m_ptr + out, big)
    tl.store(part_s_ptr + out, tl.sum(s, axis=0))
    tl.store(part_i_ptr + out, first)
    tl.store(part_m2_ptr + out, second)


@triton.jit
def _finish_kernel(
    logits_ptr,
    allowed_ptr,
    current_ptr,
    part_m_ptr,
    part_s_ptr,
    part_i_ptr,
    part_m2_ptr,
    top_id_ptr,
    top_prob_ptr,
    cur_prob_ptr,
    margin_ptr,
    n_cols,
    row_stride,
    n_chunks,
    HAS_ALLOWED: tl.constexpr,
    HAS_CURRENT: tl.constexpr,
    WANT_MARGIN: tl.constexpr,
    BLOCK_C: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    k = tl.arange(0, BLOCK_C)
    present = k < n_chunks
    base = row * n_chunks
    m = tl.load(part_m_ptr + base + k, mask=present, other=float("-inf"))
    s = tl.load(part_s_ptr + base + k, mask=present, other=0.0)
    idx = tl.load(part_i_ptr + base + k, mask=present, other=_NO_INDEX)
    m2 = tl.load(part_m2_ptr + base + k, mask=present, other=float("-inf"))
    big, first, second = _top2(m, idx, m2, BLOCK_C)
    alive = big > float("-inf")
    shift = tl.where(alive, big, 0.0)
    total = tl.sum(s * tl.exp(m - shift), axis=0)
    inv_total = tl.where(alive, 1.0 / tl.maximum(total, 1.0), 0.0)
    tl.store(top_id_ptr + row, tl.where(alive, first, 0).to(tl.int64))
    tl.store(top_prob_ptr + row, inv_total)

    if HAS_CURRENT:
        cur = tl.load(current_ptr + row)
        valid = (cur >= 0) & (cur < n_cols)
        safe = tl.where(valid, cur, 0)
        x = tl.load(logits_ptr + row * row_stride + safe).to(tl.float32)
        if HAS_ALLOWED:
            ok = tl.load(allowed_ptr + safe)
            x = tl.where(ok != 0, x, float("-inf"))
        prob = tl.exp(x - shift) * inv_total
        tl.store(cur_prob_ptr + row, tl.where(valid, prob, 0.0))

    if WANT_MARGIN:
        tl.store(margin_ptr + row, (1.0 - tl.exp(second - shift)) * inv_total)


@functools.cache
def _sm_count(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 1


def pick_launch(
    n_rows: int,
    n_cols: int,
    elem_bytes: int,
    device: torch.device,
    block_v: int | None = None,
    n_chunks: int | None = None,
) -> tuple[int, int, int, int]:
    """Choose ``(BLOCK_V, chunk_cols, n_chunks, num_warps)`` for a launch.

    Tiles are 16 KiB of logits (4096 half-precision or 2048 fp32 columns), capped by
    the vocabulary. The vocabulary is split into chunks until there are about four
    programs per streaming multiprocessor; on the CPU interpreter, one chunk per row.
    """
    if block_v is None:
        block_v = min(16384 // elem_bytes, triton.next_power_of_2(n_cols))
    if block_v & (block_v - 1):
        raise ValueError(f"block_v must be a power of two, got {block_v}")
    tiles = math.ceil(n_cols / block_v)
    if n_chunks is None:
        target = 4 * _sm_count(device)
        n_chunks = max(1, min(tiles, math.ceil(target / max(n_rows, 1))))
    n_chunks = max(1, min(n_chunks, tiles))
    chunk_cols = math.ceil(tiles / n_chunks) * block_v
    n_chunks = math.ceil(n_cols / chunk_cols)
    num_warps = 8 if block_v >= 2048 else 4
    return block_v, chunk_cols, n_chunks, num_warps


def triton_confidence_tensors(
    logits: torch.Tensor,
    current_ids: torch.Tensor | None = None,
    *,
    want_margin: bool = False,
    allowed: torch.Tensor | None = None,
    block_v: int | None = None,
    n_chunks: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """Return ``(top_id, top_prob, cur_prob, margin)``; see the module docstring.

    ``block_v`` and ``n_chunks`` override the tile size and the vocabulary split
    (tests use them to exercise several chunks on small inputs).
    """
    check_confidence_args(logits, current_ids, allowed)
    if logits.device.type != "cuda" and not INTERPRETED:
        raise RuntimeError(
            "the Triton confidence kernel needs CUDA tensors, or TRITON_INTERPRET=1 "
            "set before kernels.confidence is imported"
        )
    n, v = logits.shape
    dev = logits.device
    if logits.stride(1) != 1:
        logits = logits.contiguous()
    top_id = torch.empty(n, dtype=torch.int64, device=dev)
    top_prob = torch.empty(n, dtype=torch.float32, device=dev)
    cur_prob = torch.empty(n, dtype=torch.float32, device=dev) if current_ids is not None else None
    margin = torch.empty(n, dtype=torch.float32, device=dev) if want_margin else None
    if n == 0:
        return top_id, top_prob, cur_prob, margin

    block, chunk_cols, chunks, warps = pick_launch(
        n, v, logits.element_size(), dev, block_v, n_chunks
    )
    part_m = torch.empty((n, chunks), dtype=torch.float32, device=dev)
    part_s = torch.empty_like(part_m)
    part_m2 = torch.empty_like(part_m)
    part_i = torch.empty((n, chunks), dtype=torch.int32, device=dev)
    mask = allowed.contiguous().view(torch.uint8) if allowed is not None else top_prob  # dummy
    current = current_ids.contiguous() if current_ids is not None else top_id  # dummy

    _partials_kernel[(n, chunks)](
        logits,
        mask,
        part_m,
        part_s,
        part_i,
        part_m2,
        v,
        logits.stride(0),
        chunk_cols,
        chunks,
        HAS_ALLOWED=allowed is not None,
        BLOCK_V=block,
        num_warps=warps,
    )
    _finish_kernel[(n,)](
        logits,
        mask,
        current,
        part_m,
        part_s,
        part_i,
        part_m2,
        top_id,
        top_prob,
        cur_prob if cur_prob is not None else top_prob,
        margin if margin is not None else top_prob,
        v,
        logits.stride(0),
        chunks,
        HAS_ALLOWED=allowed is not None,
        HAS_CURRENT=current_ids is not None,
        WANT_MARGIN=want_margin,
        BLOCK_C=max(triton.next_power_of_2(chunks), 2),
        num_warps=1,
    )
    return top_id, top_prob, cur_prob, margin
