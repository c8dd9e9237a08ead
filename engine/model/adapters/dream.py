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

from dataclasses import dataclass
from typing import Any

from torch import Tensor, nn

from engine.model import native
from engine.model.adapters import common
from engine.model.adapters.common import CacheAt, HeadedModel, RMSNorm, Rope, apply_rope, attend
from engine.model.kv_cache import KVCache
from engine.model.native import SpecialTokens

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
        cfg = cls(**common.known_keys(cls, d))
        common.check_silu_unscaled("Dream", cfg.hidden_act, cfg.rope_scaling)
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


class DecoderLayer(nn.Module):
    def __init__(self, c: DreamConfig) -> None:
        super().__init__()
        self.self_attn = SelfAttention(c)
        self.mlp = common.MLP(c.hidden_size, c.intermediate_size)
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
        self.embed_tokens = native.embedding(c.vocab_size, c.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(c) for _ in range(c.num_hidden_layers))
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps)


class DreamLM(HeadedModel):
    def __init__(self, c: DreamConfig, special: SpecialTokens) -> None:
        super().__init__()
        self.args = c
        self.model = DreamBackbone(c)
        self.lm_head = nn.Linear(c.hidden_size, c.vocab_size, bias=False)
        self.tie_head()
        self.rope = Rope(c.hd, c.rope_theta)
        self.cache_batch = 0
        self.config = self.model_config(attention="bidirectional", shift_logits=True, special=special)

    def embedding(self) -> nn.Embedding:
        return self.model.embed_tokens


def build(hf: dict[str, Any], special: SpecialTokens) -> DreamLM:
    return DreamLM(DreamConfig.from_hf(hf), special)
