"""Benchmark: fused Triton confidence against the PyTorch reference.

Run from the repository root::

    python bench/kernels.py                 # bf16, vocab 126,464 and 157,184, rows 32/256/2048
    python bench/kernels.py --margin --dtype fp16

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

    tri = kernels.triton_confidence(logits, current, want_margin=margin)
    try:
        ref = kernels.reference_confidence(logits, current, want_margin=margin)
    except torch.cuda.OutOfMemoryError:
        ref = None
    if ref is not None:
        result["match"] = bool(torch.equal(tri.top_id, ref.top_id)) and bool(
            torch.allclose(tri.top_prob, ref.top_prob, rtol=1e-4, atol=1e-6)
        )
        del ref
        ref_ms = time_ms(
            lambda: kernels.reference_confidence(logits, current, want_margin=margin),
            device,
            reps,
            flush,
        )
    else:
        result["match"] = None
        ref_ms = float("nan")
    tri_ms = time_ms(
        lambda: kernels.triton_confidence(logits, current, want_margin=margin),
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
    args = parser.parse_args(argv)

    record: dict[str, object] = {"bench": "kernels", "kernel": "confidence", "dtype": args.dtype}
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
