"""Fast eager PyTorch confidence: the CPU path of the decoding step.

Same contract as ``kernels.reference`` (which stays the readable specification). The
confidence is ``exp(max - logsumexp) = 1 / sum(exp(x - max))``, computed a chunk of rows at a
time (``rows_per_chunk``: about ``CHUNK_VALUES`` values, one row of a 126,464 vocabulary, ~0.5
MB, inside a core's L2; a whole 32-row block of tiny-code's 4,096, where many calls of a dozen
small ops each cost more than the arithmetic). Each row's maximum and its first index come first
(``first_max``: segment maxima, then one short ``argmax``; ``max`` with indices is ~8x slower on
a CPU). Each chunk is then shifted into one reused float32 buffer (bf16/fp16 logits are
converted into it first), exponentiated in place and summed while it is still in cache. Nothing
of size [N, V] is materialised (no float32 copy of bf16 logits, no softmax, no second pass of
``logsumexp``).

The exponentials are most of the work, and which of torch's two float32 exponentials is faster
depends on the CPU: on an AMD EPYC (AVX2) ``exp2`` took ~2.2 ms of 32 x 126,464 where ``exp``
took ~4; on an Intel Xeon with AVX-512 ``exp`` runs near memory speed and ``exp2`` is 1.5-1.9x
slower (one thread). So ``base()`` times both once per process (``kernels.warm_up``, when a
model loads), on a buffer in L2, and
keeps the faster (``exp`` unless ``exp2`` wins by ``EXP2_MARGIN``: a machine close to even
decides the same way every run). ``exp(x - max)`` is then either ``exp`` of ``x - max`` or
``exp2((x - max) log2 e)``; in both the shift and the scale are one fused multiply-add
(``torch.add`` with ``alpha``, from the scaled maximum: vectorised as an FMA on AVX2, AVX-512
and NEON), so each exponent is rounded once, as ``x - max`` is: the same accuracy (~2e-7
relative against float64; ~1e-6 on torch's portable build, which rounds twice), not the same
bits.

The exponents are floored at 2^-120 (``FLOOR_LOG2``), so no exponential is a subnormal float: a
CPU computes those 10-30x slower (with logits spread over more than ~87, a confident model, the
unfloored path took 60-120 ms instead of 4-8). What the floor adds to a sum of at least 1 is
below 126,464 x 2^-120 (~1e-31). The probabilities asked for (top, current token, second) are
recomputed from their logits without the floor, so a token at ``-inf`` still gets exactly 0.

32 rows of the LLaDA-8B vocabulary, one thread (``python bench/step_work.py``,
BENCHMARKS.md): on the EPYC, float32 logits 10.5 -> 4.9 ms against ``max`` + ``logsumexp``,
bf16 logits 28.6 -> 5.6 ms, float32 logits spread wide (std 20) 91 -> 5.1 ms; on the Xeon
(``exp``, a row a chunk) 12.1 -> 4.8, 28.7 -> 7.9 and 130 -> 4.2 ms.
"""

from __future__ import annotations

import functools
import math
import time
from dataclasses import dataclass

import torch

from kernels.reference import NEG_INF, Tensors, check_confidence_args

CHUNK_VALUES = 128 * 1024  # float32 values a chunk of float32 logits takes: 0.5 MB, inside a core's L2
CONVERTED_CHUNK_VALUES = 4 * 126_464  # the same for converted (or masked) logits, ~2 MB: a dozen more ops a chunk
SEGMENT = 256  # columns per segment of the first-maximum search (first_max)
LOG2_E = math.log2(math.e)
FLOOR_LOG2 = -120.0  # exponentials floored at 2^-120: every one stays a normal float (see the module doc)
EXP2_MARGIN = 1.25  # exp2 is kept only when this many times faster than exp (base)
PROBE_VALUES = 16 * 1024  # values base() times each exponential over (64 KB: in L2, one thread)
SEGMENTED_FROM = 128 * 1024  # values from which first_max searches by segments (16 x 4,096 is faster without)


def rows_per_chunk(vocab: int, values: int | None = None) -> int:
    """The rows of `vocab` logits a chunk of about `values` (``CHUNK_VALUES``) takes (each row
    is reduced alone: any count gives the same bits)."""
    return max(1, (CHUNK_VALUES if values is None else values) // max(1, vocab))


@dataclass(frozen=True)
class Base:
    """How ``exp(x - max)`` is computed: ``exp_`` of ``(x - max) * scale``, floored at ``floor``."""
    name: str  # "exp" or "exp2"
    scale: float  # 1 for exp, log2 e for exp2
    floor: float  # 2^-120 in this base's exponent

    def exp_(self, e: torch.Tensor) -> torch.Tensor:
        return e.exp2_() if self.name == "exp2" else e.exp_()


EXP = Base("exp", 1.0, FLOOR_LOG2 * math.log(2.0))
EXP2 = Base("exp2", LOG2_E, FLOOR_LOG2)


@functools.cache
def base() -> Base:
    """The faster exponential on this CPU, timed once per process (~1 ms): ``exp_`` and ``exp2_``
    in place over ``PROBE_VALUES`` values, alternated, the best of each, on one torch thread
    (torch runs ``exp_`` in parallel from a smaller size than ``exp2_``: on a busy machine the
    threads' wake-ups would be timed, not the exponentials); see the module doc."""
    src = torch.linspace(-30.0, 0.0, PROBE_VALUES)
    buf = torch.empty_like(src)
    best = {EXP.name: math.inf, EXP2.name: math.inf}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for _ in range(5):
            for b in (EXP, EXP2):
                t0 = time.perf_counter()
                for _ in range(8):
                    b.exp_(buf.copy_(src))
                best[b.name] = min(best[b.name], time.perf_counter() - t0)
    finally:
        torch.set_num_threads(threads)
    return choose(best[EXP.name], best[EXP2.name])


def choose(exp_s: float, exp2_s: float) -> Base:
    """``exp`` unless ``exp2`` took ``EXP2_MARGIN`` times less (a near tie decides alike every run)."""
    return EXP2 if exp2_s * EXP2_MARGIN < exp_s else EXP


def first_max(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's maximum [n, 1] and the lowest column holding it [n], as ``x.max(dim=1)``
    gives them, from one vectorised pass: the maxima of ``SEGMENT``-column segments (``amax``
    has no index to carry: ~10x faster than ``max`` with indices on a CPU), the row's maximum
    among them, then an ``argmax`` (the first maximum on ties, as PyTorch documents) inside the
    first segment that reaches it only."""
    n, v = x.shape
    whole = v // SEGMENT * SEGMENT
    if whole == 0 or n * v < SEGMENTED_FROM:  # a small block: the few ops below cost more than they save
        top, ids = x.max(dim=1, keepdim=True)
        return top, ids.squeeze(1)
    seg_max = x[:, :whole].reshape(n, whole // SEGMENT, SEGMENT).amax(dim=2)
    if whole < v:  # the last, shorter segment
        seg_max = torch.cat([seg_max, x[:, whole:].amax(dim=1, keepdim=True)], dim=1)
    top = seg_max.amax(dim=1, keepdim=True)
    start = (seg_max == top).to(torch.uint8).argmax(dim=1) * SEGMENT  # the first segment holding it
    # its columns (a short last segment repeats column v - 1 after its own: never an earlier maximum)
    cols = (start[:, None] + torch.arange(SEGMENT, device=x.device)).clamp_max(v - 1)
    return top, start + x.gather(1, cols).argmax(dim=1)


def eager_confidence_tensors(logits: torch.Tensor, current_ids: torch.Tensor | None = None, *,
                             want_margin: bool = False, allowed: torch.Tensor | None = None) -> Tensors:
    """Return ``(top_id, top_prob, cur_prob, margin)`` as ``kernels.reference`` specifies."""
    check_confidence_args(logits, current_ids, allowed)
    n, v = logits.shape
    dev, f32 = logits.device, torch.float32
    direct = logits.dtype == f32 and allowed is None  # the logits themselves are read: no copy
    rows = rows_per_chunk(v, CHUNK_VALUES if direct else CONVERTED_CHUNK_VALUES)
    how = base()
    buf = torch.empty(min(rows, n), v, dtype=f32, device=dev)  # one chunk's exponents, reused
    cur = None if current_ids is None else current_ids.clamp(0, v - 1)[:, None]
    total = torch.empty(n, dtype=f32, device=dev)
    if direct:
        top, top_id = first_max(logits)
        picked = pick(logits, top, cur, want_margin)
        neg = top * -how.scale
        for a in range(0, n, rows):
            b = min(n, a + rows)
            exp_sum(how, torch.add(neg[a:b], logits[a:b], alpha=how.scale, out=buf[: b - a]), total[a:b])
    else:  # each chunk is converted (and masked) into the buffer, then shifted there in place
        blocked = None if allowed is None else ~allowed
        top = torch.empty(n, 1, dtype=f32, device=dev)
        top_id = torch.empty(n, dtype=torch.int64, device=dev)
        picked = torch.empty(n, 3, dtype=f32, device=dev)
        for a in range(0, n, rows):
            b = min(n, a + rows)
            x = buf[: b - a].copy_(logits[a:b])
            if blocked is not None:
                x.masked_fill_(blocked, NEG_INF)
            top[a:b], top_id[a:b] = first_max(x)
            picked[a:b] = pick(x, top[a:b], None if cur is None else cur[a:b], want_margin)
            exp_sum(how, torch.add(top[a:b] * -how.scale, x, alpha=how.scale, out=x), total[a:b])
    num = how.exp_(torch.add(top * -how.scale, picked, alpha=how.scale))  # the same exponentials, unfloored
    alive = top > NEG_INF  # a dead row (all -inf) gives NaN above: zeroed here
    prob = torch.where(alive, num / total[:, None], 0.0)
    cur_prob = None
    if current_ids is not None:
        cur_prob = torch.where((current_ids >= 0) & (current_ids < v), prob[:, 1], 0.0)
    margin = prob[:, 0] - prob[:, 2] if want_margin else None
    return torch.where(alive.squeeze(1), top_id, 0), prob[:, 0], cur_prob, margin


def pick(x: torch.Tensor, top: torch.Tensor, cur: torch.Tensor | None, want_margin: bool) -> torch.Tensor:
    """[rows, 3]: the logits whose probabilities are asked for: each row's top, its current
    token's and its second largest (-inf where not asked: probability 0)."""
    none = torch.full_like(top, NEG_INF)
    second = x.topk(2, dim=1).values[:, 1:] if want_margin and x.shape[1] >= 2 else none
    return torch.cat([top, none if cur is None else x.gather(1, cur), second], dim=1)


def exp_sum(how: Base, e: torch.Tensor, out: torch.Tensor) -> None:
    """Sum each row of the exponentials of ``e`` into ``out``, ``e`` floored in place first."""
    torch.sum(how.exp_(e.clamp_min_(how.floor)), dim=1, out=out)
