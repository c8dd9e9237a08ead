"""GPU benchmark: one 32-token block forward of the native LLaDA2 adapter over a KV cache.

Builds the adapter with LLaDA2.0-mini's public config (16B MoE; random bf16 weights made
on the device, nothing downloaded), fills cache rows with 1k / 4k cached tokens, and times
one block-causal forward of a 32-token noisy block at batch 1 and 8, as the decoder issues
it; reports the peak memory. Prints a table, then one JSON line.

    python bench/gpu_llada2.py                     # on a CUDA device
    python bench/gpu_llada2.py --config DIR/config.json   # a local copy of the real config
    python bench/gpu_llada2.py --tiny --device cpu # a smoke run of the script itself
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import torch

from engine.adapters.llada2 import LLaDA2Model, build
from engine.model import SpecialTokens

# LLaDA2.0-mini's config.json (inclusionAI/LLaDA2.0-mini), the keys the adapter reads
MINI: dict[str, Any] = {
    "model_type": "llada2_moe", "architectures": ["LLaDA2MoeModelLM"], "vocab_size": 157184,
    "hidden_size": 2048, "intermediate_size": 5120, "num_hidden_layers": 20, "num_attention_heads": 16,
    "num_key_value_heads": 4, "head_dim": 128, "hidden_act": "silu", "use_qkv_bias": False,
    "use_qk_norm": True, "use_bias": False, "norm_head": False, "rms_norm_eps": 1e-6,
    "tie_word_embeddings": False, "max_position_embeddings": 32768, "rope_theta": 600000,
    "partial_rotary_factor": 0.5, "num_experts": 256, "num_shared_experts": 1, "num_experts_per_tok": 8,
    "n_group": 8, "topk_group": 4, "routed_scaling_factor": 2.5, "moe_intermediate_size": 512,
    "first_k_dense_replace": 1, "score_function": "sigmoid", "norm_topk_prob": True,
}
TINY = {**MINI, "vocab_size": 512, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 3,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "num_experts": 16,
        "moe_intermediate_size": 32, "n_group": 4, "topk_group": 2}
SPECIAL = SpecialTokens(mask=156895, end_of_text=156892, end_of_middle=156892, pad=156892,
                        fim_prefix=-1, fim_suffix=-1, fim_middle=-1)  # ids only label the bench


def random_model(cfg: dict[str, Any], device: torch.device, dtype: torch.dtype) -> LLaDA2Model:
    with torch.device("meta"):
        m = build(cfg, SPECIAL)
    m = m.to(dtype).to_empty(device=device)  # one bf16 copy, allocated on the device
    g = torch.Generator(device=device).manual_seed(0)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name.endswith("weight") and p.dim() == 1:
                p.fill_(1.0)
            else:
                p.normal_(0.0, 0.02, generator=g)
        for _, b in m.named_buffers():
            b.zero_()
    return m.eval()


def block_inputs(batch: int, ctx: int, block: int, vocab: int, device: torch.device) -> dict[str, Any]:
    """The decoder's feed for the active block at absolute [ctx, ctx + block) (ctx aligned):
    noisy, bidirectional inside, reading every cached clean slot before it."""
    S = ctx + block
    pos = torch.arange(ctx, S, device=device).expand(batch, block)
    kpos = torch.arange(S, device=device)
    qb = torch.full((batch, block), ctx, device=device)
    clean_ok = kpos[None, None, :] < qb[:, :, None]
    own = (kpos[None, None, :] >= ctx)
    mask = (clean_ok | own)[:, None]  # what layout_mask gives a NOISY block over clean context
    return {"idx": torch.randint(0, vocab, (batch, block), device=device), "pos": pos, "mask": mask,
            "rows": torch.arange(batch, device=device), "slots": pos, "kv_len": S,
            "logits_at": torch.arange(block, device=device).expand(batch, block)}


def time_forward(m: LLaDA2Model, inp: dict[str, Any], iters: int, device: torch.device) -> float:
    def once() -> None:
        m(inp["idx"], inp["pos"], inp["mask"], rows=inp["rows"], slots=inp["slots"], kv_len=inp["kv_len"],
          logits_at=inp["logits_at"])

    with torch.inference_mode():
        for _ in range(2):
            once()
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(iters):
            once()
        if device.type == "cuda":
            torch.cuda.synchronize()
    return (time.perf_counter() - t0) / iters * 1000


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--config", help="a local config.json of LLaDA2.0-mini (default: its keys, built in)")
    ap.add_argument("--tiny", action="store_true", help="a tiny config (smoke test of this script)")
    ap.add_argument("--contexts", default="1024,4096")
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--iters", type=int, default=5)
    args = ap.parse_args()
    dev = torch.device(args.device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        reason = "no CUDA device (this benchmark needs a GPU; --device cpu --tiny smoke-tests it)"
        print(f"bench/gpu_llada2.py: skipped: {reason}")
        print(json.dumps({"bench": "gpu_llada2", "skipped": True, "reason": reason}))
        return
    cfg = TINY if args.tiny else (json.load(open(args.config)) if args.config else MINI)
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    t0 = time.perf_counter()
    m = random_model(cfg, dev, dtype)
    build_s = time.perf_counter() - t0
    n_params = sum(p.numel() for p in m.parameters())
    ctxs = [int(x) for x in args.contexts.split(",")]
    batches = [int(x) for x in args.batches.split(",")]
    block = m.config.block_size
    rows = []
    print(f"LLaDA2 adapter, {n_params / 1e9:.2f}B params ({'tiny' if args.tiny else 'LLaDA2.0-mini config'}), "
          f"{dtype}, {dev} {torch.cuda.get_device_name(dev) if dev.type == 'cuda' else ''}; built in {build_s:.1f}s")
    print(f"{'batch':>5} {'cached':>7} {'ms/forward':>11} {'tok/s':>9} {'peak GiB':>9}")
    for B in batches:
        m.setup_cache(B, max(ctxs) + block + 1)
        for ctx in ctxs:
            for layer in m.layers:  # cached K/V: random, as timing depends on shapes only
                c = layer.attention.kv_cache
                c.k.normal_()
                c.v.normal_()
            if dev.type == "cuda":
                torch.cuda.reset_peak_memory_stats(dev)
            ms = time_forward(m, block_inputs(B, ctx, block, m.config.vocab_size, dev), args.iters, dev)
            peak = torch.cuda.max_memory_allocated(dev) / 2**30 if dev.type == "cuda" else None
            rows.append({"batch": B, "cached": ctx, "block": block, "ms": round(ms, 2),
                         "tokens_per_s": round(B * block / ms * 1000, 1),
                         "peak_gib": round(peak, 2) if peak is not None else None})
            print(f"{B:>5} {ctx:>7} {ms:>11.2f} {rows[-1]['tokens_per_s']:>9.1f} {peak or float('nan'):>9.2f}")
        m.drop_cache()
        if dev.type == "cuda":
            torch.cuda.empty_cache()
    print(json.dumps({"bench": "gpu_llada2", "device": str(dev), "params": n_params, "dtype": str(dtype),
                      "moe": "per-expert loop (no grouped GEMM)", "tiny": args.tiny, "rows": rows}))


if __name__ == "__main__":
    main()
