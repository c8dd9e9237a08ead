"""The step that bench/gpu_llada2.py times: the native LLaDA2 adapter with random weights made
on the device (LLaDA2.0-mini's public config, or a tiny one of the same shape; nothing
downloaded), its cache rows filled, and one block-causal forward of a 32-token noisy block as
the decoder issues it, timed eagerly or replayed as one CUDA graph.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch

from engine.model.adapters.common import consecutive_from
from engine.model.adapters.llada2 import LLaDA2Model, build
from engine.model.native import SpecialTokens

# LLaDA2.0-mini's config.json (inclusionAI/LLaDA2.0-mini; LLaDA2.1-mini has the same shape),
# the keys the adapter reads
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
CAPACITY = {"mini": 48, "tiny": 10}  # LLaDA2.2's expert_capacity; the tiny one keeps top-8 below it
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
    m.stack_experts()  # as the loader does once the checkpoint is assigned
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
    g = torch.Generator(device=device).manual_seed(batch * 7919 + ctx)
    return {"idx": torch.randint(0, vocab, (batch, block), device=device, generator=g), "pos": pos,
            "mask": mask, "rows": torch.arange(batch, device=device), "slots": pos, "kv_len": S,
            "logits_at": torch.arange(block, device=device).expand(batch, block)}


def forward(m: LLaDA2Model, inp: dict[str, Any]) -> torch.Tensor:
    return m(inp["idx"], inp["pos"], inp["mask"], rows=inp["rows"], slots=inp["slots"], kv_len=inp["kv_len"],
             logits_at=inp["logits_at"])


def graphed_step(m: LLaDA2Model, inp: dict[str, Any]) -> Callable[[], torch.Tensor]:
    """The block step captured as one CUDA graph (gpt-fast's way; CUDA only): the RoPE tables
    and the cache-row run are read once, outside, so nothing in the step reads back to the host;
    replaying launches every kernel of the forward at once. Same inputs, same output buffer."""
    cos, sin = m.rope.tables(inp["pos"])
    cache_at = (inp["rows"], inp["slots"], inp["kv_len"], consecutive_from(inp["rows"]))

    def step() -> torch.Tensor:
        x = m.embed(inp["idx"])
        for layer in m.layers:
            x = layer(x, cos, sin, inp["mask"], cache_at)
        x = torch.gather(x, 1, inp["logits_at"][:, :, None].expand(-1, -1, x.shape[-1]))
        return m.final(x).float()

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up (Triton compiles, allocator settles) off the capture
        for _ in range(2):
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = step()

    def replay() -> torch.Tensor:
        graph.replay()
        return out

    return replay


def time_forward(m: LLaDA2Model, inp: dict[str, Any], iters: int, device: torch.device,
                 graph: bool = False) -> tuple[float, torch.Tensor]:
    """(mean ms a forward, the logits of the first), after two untimed warm-up forwards;
    `graph`: the step replayed as a CUDA graph."""
    with torch.inference_mode():
        run = graphed_step(m, inp) if graph else (lambda: forward(m, inp))
        logits = run().clone()
        run()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        for _ in range(iters):
            run()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    return (time.perf_counter() - t0) / iters * 1000, logits


def fill_cache(m: LLaDA2Model) -> None:
    for c in m.kv_caches():  # cached K/V: random, as timing depends on shapes only
        c.k.normal_()
        c.v.normal_()
