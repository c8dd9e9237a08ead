"""LLaDA-MoE (inclusionAI/LLaDA-MoE-7B-A1B-Base/Instruct, model_type "lladamoe"), native.

An OLMoE-shaped mixture of experts trained as a fully bidirectional masked-diffusion model
(about 1.4B parameters active per token of 7B): RMSNorm before attention and MLP, q/k/v/o
projections (bias with `attention_bias`), an RMSNorm over each head of q and of k before
rotary positions (`qk_layernorm`; weights of `head_dim`), q/k/v clamped to +-`clip_qkv` when
set, rotary over the first `partial_rotary_factor` of each head, a softmax router over
`num_experts` experts of which `num_experts_per_tok` run per token with their softmax
probabilities as weights (not renormalised: the published block fixes `norm_topk_prob` to
False whatever the config says; an `expert_bias` is added to the probabilities before the
choice and stays in the weights), a dense MLP on layers whose `moe_layer_freq` is 0, and a
shared expert beside the routed ones when `shared_expert_intermediate_size` is set. Logits
are not shifted (position i predicts token i). Mask id: `mask_token_id` in config.json, else
the tokenizer's `<|mask|>` 156895.

Checkpoint names: `model.embed_tokens.weight`, `model.layers.N.self_attn.{q,k,v,o}_proj`,
`model.layers.N.self_attn.{q,k}_norm.weight`, `model.layers.N.mlp.gate.weight`,
`model.layers.N.mlp.experts.E.{gate,up,down}_proj.weight` (a dense layer:
`model.layers.N.mlp.{gate,up,down}_proj.weight`), `model.layers.N.shared_expert.*`,
`model.layers.N.{input,post_attention}_layernorm.weight`, `model.norm.weight`, `lm_head.weight`.
Learned from the published modeling code's semantics (`modeling_lladamoe.py`, as carried by
the dllm training library); written here independently.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from engine.model import native
from engine.model.adapters import common
from engine.model.adapters.common import CacheAt, HeadedModel, RMSNorm, Rope, apply_rope, attend
from engine.model.kv_cache import KVCache
from engine.model.native import SpecialTokens

MODEL_TYPES = ("lladamoe", "llada_moe")
ARCHITECTURES = ("LLaDAMoEModelLM", "LLaDAMoEModel")


@dataclass(frozen=True)
class LLaDAMoEConfig:
    """The config.json keys this adapter reads (defaults: LLaDA-MoE-7B-A1B)."""

    vocab_size: int = 157184
    hidden_size: int = 2048
    num_hidden_layers: int = 16
    num_attention_heads: int = 16
    num_key_value_heads: int = 16
    hidden_act: str = "silu"
    rms_norm_eps: float = 1e-5
    rope_theta: float = 50000.0
    rope_scaling: dict[str, Any] | None = None
    partial_rotary_factor: float = 1.0
    max_position_embeddings: int = 8192
    tie_word_embeddings: bool = False
    attention_bias: bool = False
    clip_qkv: float | None = None
    qk_layernorm: bool = True
    dense_intermediate_size: int = 8192
    expert_intermediate_size: int = 1024
    shared_expert_intermediate_size: int | None = None
    num_experts: int = 64
    num_experts_per_tok: int = 8
    moe_layer_freq: tuple[int, ...] | list[int] | None = None
    moe_router_score_function: str = "softmax"
    moe_router_enable_expert_bias: bool = False
    block_size: int = 32  # decoding block of the approximate cache

    @classmethod
    def from_hf(cls, d: dict[str, Any]) -> LLaDAMoEConfig:
        cfg = cls(**common.known_keys(cls, d))
        common.check_silu_unscaled("LLaDA-MoE", cfg.hidden_act, cfg.rope_scaling)
        if cfg.moe_router_score_function != "softmax":  # the published block computes softmax whatever it says
            raise ValueError(f"LLaDA-MoE: moe_router_score_function {cfg.moe_router_score_function!r} is not "
                             "supported (the published code routes by softmax)")
        if cfg.hidden_size % cfg.num_attention_heads:
            raise ValueError("LLaDA-MoE: hidden_size must be a multiple of num_attention_heads")
        if cfg.moe_layer_freq is not None and len(cfg.moe_layer_freq) != cfg.num_hidden_layers:
            raise ValueError(f"LLaDA-MoE: moe_layer_freq has {len(cfg.moe_layer_freq)} entries for "
                             f"{cfg.num_hidden_layers} layers")
        if not 1 <= cfg.num_experts_per_tok <= cfg.num_experts:
            raise ValueError("LLaDA-MoE: num_experts_per_tok must be in [1, num_experts]")
        return cfg

    @property
    def hd(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def intermediate_size(self) -> int:  # the engine's ModelConfig view: the dense MLP's width
        return self.dense_intermediate_size

    def is_moe(self, layer: int) -> bool:
        return self.moe_layer_freq is None or bool(self.moe_layer_freq[layer])


class SelfAttention(nn.Module):
    def __init__(self, c: LLaDAMoEConfig) -> None:
        super().__init__()
        self.c = c
        H, KV, hd, b = c.num_attention_heads, c.num_key_value_heads, c.hd, c.attention_bias
        self.q_proj = nn.Linear(c.hidden_size, H * hd, bias=b)
        self.k_proj = nn.Linear(c.hidden_size, KV * hd, bias=b)
        self.v_proj = nn.Linear(c.hidden_size, KV * hd, bias=b)
        self.o_proj = nn.Linear(H * hd, c.hidden_size, bias=b)
        if c.qk_layernorm:
            self.q_norm = RMSNorm(hd, c.rms_norm_eps)
            self.k_norm = RMSNorm(hd, c.rms_norm_eps)
        self.kv_cache: KVCache | None = None

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, mask: Tensor | None, cache_at: CacheAt) -> Tensor:
        c, (B, T, _) = self.c, x.shape
        q = self.q_proj(x).view(B, T, c.num_attention_heads, c.hd)
        k = self.k_proj(x).view(B, T, c.num_key_value_heads, c.hd)
        v = self.v_proj(x).view(B, T, c.num_key_value_heads, c.hd)
        if c.qk_layernorm:
            q, k = self.q_norm(q), self.k_norm(k)
        if c.clip_qkv is not None:
            q, k, v = (t.clamp(-c.clip_qkv, c.clip_qkv) for t in (q, k, v))
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        return self.o_proj(attend(q, k, v, mask, self.kv_cache, cache_at))


class SparseMoE(nn.Module):
    """Softmax router, top-k experts weighted by their (biased) probabilities, not renormalised."""

    def __init__(self, c: LLaDAMoEConfig) -> None:
        super().__init__()
        self.top_k = c.num_experts_per_tok
        self.gate = nn.Linear(c.hidden_size, c.num_experts, bias=False)
        self.experts = nn.ModuleList(common.MLP(c.hidden_size, c.expert_intermediate_size)
                                     for _ in range(c.num_experts))
        self.expert_bias: Tensor | None
        if c.moe_router_enable_expert_bias:
            self.register_buffer("expert_bias", torch.zeros(c.num_experts))
        else:
            self.expert_bias = None

    def forward(self, x: Tensor) -> Tensor:
        shape = x.shape
        h = x.reshape(-1, shape[-1])
        probs = torch.softmax(self.gate(h).float(), dim=-1)
        if self.expert_bias is not None:
            probs = probs + self.expert_bias.float()
        weights, chosen = torch.topk(probs, self.top_k, dim=-1)
        weights = weights.to(h.dtype)
        out = torch.zeros_like(h)
        for e in chosen.unique().tolist():
            tok, slot = torch.where(chosen == e)
            out.index_add_(0, tok, self.experts[e](h[tok]) * weights[tok, slot, None])
        return out.view(shape)


class DecoderLayer(nn.Module):
    def __init__(self, c: LLaDAMoEConfig, i: int) -> None:
        super().__init__()
        self.self_attn = SelfAttention(c)
        moe = c.is_moe(i)
        self.mlp: nn.Module = SparseMoE(c) if moe else common.MLP(c.hidden_size, c.dense_intermediate_size)
        self.shared_expert = common.MLP(c.hidden_size, c.shared_expert_intermediate_size) \
            if moe and c.shared_expert_intermediate_size else None
        self.input_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)

    @property
    def attention(self) -> SelfAttention:
        return self.self_attn

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, mask: Tensor | None, cache_at: CacheAt) -> Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask, cache_at)
        h = self.post_attention_layernorm(x)
        out = self.mlp(h)
        if self.shared_expert is not None:
            out = out + self.shared_expert(h)
        return x + out


class LLaDAMoEBackbone(nn.Module):
    def __init__(self, c: LLaDAMoEConfig) -> None:
        super().__init__()
        self.embed_tokens = native.embedding(c.vocab_size, c.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(c, i) for i in range(c.num_hidden_layers))
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps)


class LLaDAMoELM(HeadedModel):
    optional_buffers = ("expert_bias",)

    def __init__(self, c: LLaDAMoEConfig, special: SpecialTokens) -> None:
        super().__init__()
        self.args = c
        self.model = LLaDAMoEBackbone(c)
        self.lm_head = nn.Linear(c.hidden_size, c.vocab_size, bias=False)
        self.tie_head()
        self.rope = Rope(int(c.hd * c.partial_rotary_factor), c.rope_theta)
        self.cache_batch = 0
        self.config = self.model_config(attention="bidirectional", shift_logits=False, special=special)

    def embedding(self) -> nn.Embedding:
        return self.model.embed_tokens


def build(hf: dict[str, Any], special: SpecialTokens) -> LLaDAMoELM:
    return LLaDAMoELM(LLaDAMoEConfig.from_hf(hf), special)
