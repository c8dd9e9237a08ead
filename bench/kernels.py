"""Benchmark: fused Triton confidence against the PyTorch reference.

Run from the repository root::

    python bench/kernels.py                 # bf16, vocab 126,464 and 157,184, rows 32/256/2048
    python bench/kernels.py --margin --dtype fp16
    python bench/kernels.py --kernel moe    # routed experts: Triton, eager (grouped GEMM), per-expert loop

For each (vocabulary, rows) it times both backends on the same logits (with current
ids, as in a T2T step), checks that they agree, and reports effective bandwidth
(bytes of logits read / time, in GB/s) and the speed ratio reference / Triton. It
prints a table, then one JSON line (the last line of stdout).

It needs a CUDA device: elsewhere it prints why and a JSON line with "skipped": true,
and exits 0. ``--device cpu`` runs it through the Triton interpreter with whatever small
shapes you pass, to check the script itself (set TRITON_INTERPRET=1; timings meaningless).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

# Run as a script, this file's folder comes first on sys.path and its name would
# shadow the ``kernels`` package: put the repository root there instead.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
sys.path.insert(0, str(_HERE.parent))

import torch  # noqa: E402

import kernels  # noqa: E402
import kernels.moe_eager  # noqa: E402

VOCABS = (126_464, 157_184)  # LLaDA-8B, LLaDA2.x
ROWS = (32, 256, 2048)
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def skip_reason(device: str) -> str | None:
    """Why the benchmark cannot run here, or None."""
    if not kernels.triton_available():
        return "Triton is not importable"
    if device == "cuda":
        if not torch.cuda.is_available():
            return "no CUDA device (the benchmark only runs on a GPU)"
        if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
            return "TRITON_INTERPRET is set; unset it to time compiled kernels"
    elif os.environ.get("TRITON_INTERPRET", "0") in ("", "0"):
        return "--device cpu needs TRITON_INTERPRET=1"
    return None


def time_ms(fn: Callable[[], object], device: str, reps: int, flush: torch.Tensor | None) -> float:
    """Median wall time of ``fn`` in milliseconds, L2 flushed before each call on CUDA."""
    for _ in range(3):
        fn()
    samples = []
    for _ in range(reps):
        if device == "cuda":
            assert flush is not None
            flush.zero_()
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            samples.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            fn()
            samples.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(samples)


def bench_one(
    rows: int, vocab: int, dtype: torch.dtype, device: str, margin: bool, reps: int, flush
) -> dict[str, object]:
    gen = torch.Generator(device=device).manual_seed(rows * 7 + vocab)
    logits = (torch.randn(rows, vocab, generator=gen, device=device) * 4).to(dtype)
    current = torch.randint(0, vocab, (rows,), generator=gen, device=device)
    nbytes = logits.numel() * logits.element_size()
    result: dict[str, object] = {"vocab": vocab, "rows": rows}

    tri = kernels.confidence(logits, current, want_margin=margin, backend="triton")
    try:
        ref = kernels.confidence(logits, current, want_margin=margin, backend="reference")
    except torch.cuda.OutOfMemoryError:
        ref = None
    if ref is not None:
        result["match"] = bool(torch.equal(tri.top_id, ref.top_id)) and bool(
            torch.allclose(tri.top_prob, ref.top_prob, rtol=1e-4, atol=1e-6)
        )
        del ref
        ref_ms = time_ms(
            lambda: kernels.confidence(logits, current, want_margin=margin, backend="reference"),
            device,
            reps,
            flush,
        )
    else:
        result["match"] = None
        ref_ms = float("nan")
    tri_ms = time_ms(
        lambda: kernels.confidence(logits, current, want_margin=margin, backend="triton"),
        device,
        reps,
        flush,
    )
    result.update(
        reference_ms=round(ref_ms, 4),
        triton_ms=round(tri_ms, 4),
        reference_gbps=round(nbytes / ref_ms / 1e6, 1),
        triton_gbps=round(nbytes / tri_ms / 1e6, 1),
        ratio=round(ref_ms / tri_ms, 2),
    )
    return result


MOE_SHAPE = {"hidden": 2048, "inter": 512, "experts": 256, "top_k": 8}  # LLaDA2.0-mini's MoE layer
MOE_TOKENS = (32, 256)  # a 32-token block at batch 1 and 8


def moe_loop(x, w13, w2, ids, weights) -> torch.Tensor:
    """The baseline: one matmul chain per chosen expert, the routing read back to the host."""
    inter = w13.shape[1] // 2
    out = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
    flat = ids.reshape(-1)
    order = flat.argsort(stable=True)
    counts = torch.bincount(flat, minlength=w13.shape[0]).tolist()
    start = 0
    for e, n in enumerate(counts):
        if n:
            pairs = order[start:start + n]
            t = pairs // ids.shape[1]
            gu = x[t] @ w13[e].T
            y = (torch.nn.functional.silu(gu[:, :inter]) * gu[:, inter:]) @ w2[e].T
            out.index_add_(0, t, y.float() * weights.reshape(-1)[pairs, None])
            start += n
    return out


def bench_moe(tokens: int, dtype: torch.dtype, device: str, reps: int, flush,
              shape: dict[str, int] = MOE_SHAPE) -> dict[str, object]:
    """Time the routed experts of one MoE layer on uniformly random routing; GB/s counts the
    weights of the experts touched (each read once) and the activations."""
    d, inter, e, k = (shape[n] for n in ("hidden", "inter", "experts", "top_k"))
    gen = torch.Generator(device=device).manual_seed(tokens)
    x = torch.randn(tokens, d, generator=gen, device=device).to(dtype)
    w13 = (torch.randn(e, 2 * inter, d, generator=gen, device=device) / d**0.5).to(dtype)
    w2 = (torch.randn(e, d, inter, generator=gen, device=device) / inter**0.5).to(dtype)
    ids = torch.rand(tokens, e, generator=gen, device=device).topk(k, dim=-1).indices
    weights = torch.rand(tokens, k, generator=gen, device=device)
    touched = int(ids.unique().numel())
    nbytes = touched * (w13[0].numel() + w2[0].numel()) * w13.element_size() + 2 * x.numel() * x.element_size()
    args = (x, w13, w2, ids, weights)
    want = moe_loop(*args)
    result: dict[str, object] = {"tokens": tokens, "experts_touched": touched}
    impls = {"loop": moe_loop, "triton": lambda *a: kernels.moe_experts(*a, backend="triton"),
             "eager": lambda *a: kernels.moe_experts(*a, backend="eager")}
    for name, fn in impls.items():
        if name == "eager" and not kernels.moe_eager.grouped_mm_supported(x):
            continue
        got = fn(*args)
        result[f"{name}_max_err"] = float((got - want).abs().max())
        ms = time_ms(functools.partial(fn, *args), device, reps, flush)
        result[f"{name}_ms"] = round(ms, 4)
        result[f"{name}_gbps"] = round(nbytes / ms / 1e6, 1)
    for name in ("triton", "eager"):
        if f"{name}_ms" in result:
            result[f"{name}_vs_loop"] = round(result["loop_ms"] / result[f"{name}_ms"], 2)  # type: ignore[operator]
    return result


def print_moe_table(results: list[dict[str, object]]) -> None:
    print(f"{'tokens':>6} {'experts':>7} {'impl':>8} {'ms':>9} {'GB/s':>8} {'vs loop':>7} {'max err':>9}")
    for r in results:
        for name in ("loop", "triton", "eager"):
            if f"{name}_ms" in r:
                print(f"{r['tokens']:>6} {r['experts_touched']:>7} {name:>8} {r[f'{name}_ms']:>9.3f} "
                      f"{r[f'{name}_gbps']:>8.1f} {r.get(f'{name}_vs_loop', 1.0):>7} {r[f'{name}_max_err']:>9.2e}")


def print_table(results: list[dict[str, object]]) -> None:
    head = f"{'vocab':>8} {'rows':>6} {'ref ms':>9} {'triton ms':>10} {'ref GB/s':>9} "
    head += f"{'tri GB/s':>9} {'ratio':>6} {'match':>6}"
    print(head)
    for r in results:
        print(
            f"{r['vocab']:>8} {r['rows']:>6} {r['reference_ms']:>9.3f} {r['triton_ms']:>10.3f} "
            f"{r['reference_gbps']:>9.1f} {r['triton_gbps']:>9.1f} {r['ratio']:>6.2f} "
            f"{r['match']!s:>6}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    parser.add_argument("--rows", type=int, nargs="+", default=list(ROWS))
    parser.add_argument("--vocab", type=int, nargs="+", default=list(VOCABS))
    parser.add_argument("--margin", action="store_true", help="also compute the top-2 margin")
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--kernel", choices=("confidence", "moe"), default="confidence")
    parser.add_argument("--tokens", type=int, nargs="+", default=list(MOE_TOKENS), help="moe: tokens a step")
    parser.add_argument("--moe-shape", type=int, nargs=4, metavar=("HIDDEN", "INTER", "EXPERTS", "TOP_K"),
                        default=list(MOE_SHAPE.values()), help="moe: the layer's shape (default LLaDA2.0-mini)")
    args = parser.parse_args(argv)

    record: dict[str, object] = {"bench": "kernels", "kernel": args.kernel, "dtype": args.dtype}
    reason = skip_reason(args.device)
    if reason is not None:
        print(f"bench/kernels.py: skipped: {reason}")
        record.update(skipped=True, reason=reason)
        print(json.dumps(record))
        return 0

    flush = None
    if args.device == "cuda":
        record["device"] = torch.cuda.get_device_name()
        flush = torch.empty(256 * 1024 * 1024, dtype=torch.uint8, device="cuda")
    else:
        record["device"] = "cpu (Triton interpreter)"
    if args.kernel == "moe":
        shape = dict(zip(MOE_SHAPE, args.moe_shape, strict=True))
        moe_results = [bench_moe(t, DTYPES[args.dtype], args.device, args.reps, flush, shape) for t in args.tokens]
        print(f"MoE experts {shape}, {args.dtype}, device: {record['device']}")
        print_moe_table(moe_results)
        record.update(skipped=False, shape=shape, results=moe_results)
        print(json.dumps(record))
        return 0
    results = [
        bench_one(rows, vocab, DTYPES[args.dtype], args.device, args.margin, args.reps, flush)
        for vocab in args.vocab
        for rows in args.rows
    ]
    print(f"confidence, {args.dtype}, margin={args.margin}, device: {record['device']}")
    print_table(results)
    record.update(skipped=False, margin=args.margin, results=results)
    print(json.dumps(record))
    return 0


if __name__ == "__main__":
    sys.exit(main())
