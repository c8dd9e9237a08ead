"""Dream (model_type "Dream": Dream-v0-Base/Instruct-7B, Dream-Coder), native.

A Qwen2-shaped transformer trained as a fully bidirectional masked-diffusion model: q/k/v
projections with bias, `o_proj` without, SwiGLU MLP, RMSNorm, full rotary. Its logits keep
the autoregressive convention: the output at position i predicts the token at i + 1 (Dream's
sampler shifts them right by one), so `shift_logits` is on and the decoder reads the logit
for position p from output p - 1. Mask id: `mask_token_id` in config.json.

Checkpoint names: `model.embed_tokens.weight`, `model.layers.N.self_attn.{q,k,v,o}_proj`,
`model.layers.N.mlp.{gate,up,down}_proj`, `model.layers.N.{input,post_attention}_layernorm`,
`model.norm.weight`, `lm_head.weight`.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import torch.nn.functional as F
from torch import Tensor, nn

from engine.model.adapters.common import AdapterModel, CacheAt, RMSNorm, Rope, apply_rope, attend
from engine.model.native import KVCache, ModelConfig, SpecialTokens

MODEL_TYPES = ("dream",)
ARCHITECTURES = ("DreamModel",)


@dataclass(frozen=True)
class DreamConfig:
    """The config.json keys this adapter reads (defaults: Dream-v0-7B)."""

    vocab_size: int = 152064
    hidden_size: int = 3584
    intermediate_size: int = 18944
    num_hidden_layers: int = 28
    num_attention_heads: int = 28
    num_key_value_heads: int = 4
    hidden_act: str = "silu"
    rms_norm_eps: float = 1e-6
    rope_theta: float = 1000000.0
    rope_scaling: dict[str, Any] | None = None
    max_position_embeddings: int = 131072
    tie_word_embeddings: bool = False
    block_size: int = 32  # decoding block of the approximate cache

    @classmethod
    def from_hf(cls, d: dict[str, Any]) -> DreamConfig:
        known = {f.name for f in fields(cls)}
        cfg = cls(**{k: v for k, v in d.items() if k in known})
        if cfg.hidden_act != "silu":
            raise ValueError(f"Dream: hidden_act {cfg.hidden_act!r} is not supported (silu only)")
        if cfg.rope_scaling and cfg.rope_scaling.get("rope_type", cfg.rope_scaling.get("type")) not in (None, "default"):
            raise ValueError(f"Dream: rope_scaling {cfg.rope_scaling} is not supported")
        return cfg

    @property
    def hd(self) -> int:
        return self.hidden_size // self.num_attention_heads


class SelfAttention(nn.Module):
    def __init__(self, c: DreamConfig) -> None:
        super().__init__()
        self.c = c
        self.q_proj = nn.Linear(c.hidden_size, c.num_attention_heads * c.hd, bias=True)
        self.k_proj = nn.Linear(c.hidden_size, c.num_key_value_heads * c.hd, bias=True)
        self.v_proj = nn.Linear(c.hidden_size, c.num_key_value_heads * c.hd, bias=True)
        self.o_proj = nn.Linear(c.num_attention_heads * c.hd, c.hidden_size, bias=False)
        self.kv_cache: KVCache | None = None

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, mask: Tensor | None, cache_at: CacheAt) -> Tensor:
        c, (B, T, _) = self.c, x.shape
        q = apply_rope(self.q_proj(x).view(B, T, c.num_attention_heads, c.hd), cos, sin)
        k = apply_rope(self.k_proj(x).view(B, T, c.num_key_value_heads, c.hd), cos, sin)
        v = self.v_proj(x).view(B, T, c.num_key_value_heads, c.hd)
        return self.o_proj(attend(q, k, v, mask, self.kv_cache, cache_at))


class MLP(nn.Module):
    def __init__(self, c: DreamConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.up_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.down_proj = nn.Linear(c.intermediate_size, c.hidden_size, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, c: DreamConfig) -> None:
        super().__init__()
        self.self_attn = SelfAttention(c)
        self.mlp = MLP(c)
        self.input_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)

    @property
    def attention(self) -> SelfAttention:
        return self.self_attn

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, mask: Tensor | None, cache_at: CacheAt) -> Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask, cache_at)
        return x + self.mlp(self.post_attention_layernorm(x))


class DreamBackbone(nn.Module):
    def __init__(self, c: DreamConfig) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(c.vocab_size, c.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(c) for _ in range(c.num_hidden_layers))
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps)


class DreamLM(AdapterModel):
    def __init__(self, c: DreamConfig, special: SpecialTokens) -> None:
        super().__init__()
        self.args = c
        self.model = DreamBackbone(c)
        self.lm_head = nn.Linear(c.hidden_size, c.vocab_size, bias=False)
        self.tie_weights()
        self.rope = Rope(c.hd, c.rope_theta)
        self.cache_batch = 0
        self.config = ModelConfig(
            vocab_size=c.vocab_size, n_layer=c.num_hidden_layers, n_head=c.num_attention_heads,
            n_kv_head=c.num_key_value_heads, dim=c.hidden_size, intermediate_size=c.intermediate_size,
            rope_base=c.rope_theta, norm_eps=c.rms_norm_eps, max_seq_len=c.max_position_embeddings,
            block_size=c.block_size, attention="bidirectional", shift_logits=True,
            tie_embeddings=c.tie_word_embeddings, special=special)

    def tie_weights(self) -> None:
        if self.args.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    def embed(self, idx: Tensor) -> Tensor:
        return self.model.embed_tokens(idx)

    def decoder_layers(self) -> nn.ModuleList:
        return self.model.layers

    def final(self, x: Tensor) -> Tensor:
        return self.lm_head(self.model.norm(x))

    def head_dims(self) -> tuple[int, int]:
        return self.args.num_key_value_heads, self.args.hd

    @property
    def output(self) -> nn.Module:
        return self.lm_head


def build(hf: dict[str, Any], special: SpecialTokens) -> DreamLM:
    return DreamLM(DreamConfig.from_hf(hf), special)
