"""The batching ceiling: one decode-step forward for 1 sequence against 8, per dtype.

    python bench/batch_forward.py [--model DIR] [--device cpu|cuda] [--context 480] [--reps 30]

A decode step feeds one 16-token block (the model's block size) per sequence over its KV
cache of `--context` tokens. If a forward for B sequences costs f(B), batching B requests
can at best serve B * f(1) / f(B) times as many as serving them one at a time: this bounds
what `bench/concurrency.py` can show before any scheduling, prefill or transport cost.
Prints a table and ends with one JSON line.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import cast

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from engine.model.native import CLEAN, NOISY, Transformer, layout_mask  # noqa: E402


def step_ms(model: Transformer, batch: int, context: int, reps: int, sync: bool) -> float:
    """Median time of one decode-step forward: `batch` rows, one block each over `context`."""
    T = model.config.block_size
    S = context + T
    ids = torch.randint(10, model.config.vocab_size, (batch, T))
    pos = (context + torch.arange(T))[None].expand(batch, T)
    q_kind, q_blk = torch.full((batch, T), NOISY), torch.full((batch, T), context)
    k_kind = torch.full((batch, S), CLEAN)
    k_kind[:, context:] = NOISY
    k_pos = torch.arange(S)[None].expand(batch, S)
    k_blk = torch.full((batch, S), -1)
    k_blk[:, context:] = context
    mask = layout_mask(q_kind, pos, q_blk, k_kind, k_pos, k_blk)
    dev = model.output.weight.device
    ids, pos, mask = ids.to(dev), pos.to(dev), mask.to(dev)
    rows, at = torch.arange(batch, device=dev), torch.arange(T, device=dev)[None].expand(batch, T)
    times = []
    with torch.inference_mode():
        for i in range(reps + 3):
            t0 = time.perf_counter()
            model(ids, pos, mask, rows=rows, slots=pos, kv_len=S, logits_at=at)
            if sync:
                torch.cuda.synchronize()
            if i >= 3:
                times.append((time.perf_counter() - t0) * 1000)
    return sorted(times)[len(times) // 2]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", help="checkpoint directory (default: the embedded model)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--context", type=int, default=480, help="cached tokens before the block")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--threads", type=int, help="torch CPU threads (default: torch's)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    from engine.model.loader import load_model
    from engine.service import default_model_dir

    out: dict[str, dict[str, float]] = {}
    print(f"{'dtype':9} {'1 seq ms':>9} {f'{args.batch} seq ms':>9} {'ceiling':>8}")
    for dtype in (torch.float32, torch.bfloat16):
        # any family's decoder keeps the native Transformer's contract (as engine/service.py reads it)
        model = cast(Transformer, load_model(args.model or default_model_dir(), device=args.device, dtype=dtype).model)
        model.setup_cache(args.batch, args.context + 2 * model.config.block_size)
        one = step_ms(model, 1, args.context, args.reps, args.device != "cpu")
        many = step_ms(model, args.batch, args.context, args.reps, args.device != "cpu")
        name = str(dtype).removeprefix("torch.")
        out[name] = {"one_ms": round(one, 3), "batch_ms": round(many, 3), "ceiling": round(args.batch * one / many, 3)}
        print(f"{name:9} {one:9.2f} {many:9.2f} {args.batch * one / many:8.2f}")
    print(json.dumps({"bench": "batch_forward", "device": args.device, "context": args.context,
                      "batch": args.batch, "threads": torch.get_num_threads(), "dtypes": out}))


if __name__ == "__main__":
    main()
