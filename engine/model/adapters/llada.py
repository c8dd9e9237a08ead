"""LLaDA-8B (model_type "llada", LLaDA-8B-Base / -Instruct / 1.5), native.

A fully bidirectional masked-diffusion transformer in the OLMo-derived "llama" block layout:
RMSNorm (`attn_norm`, `ff_norm`), separate `q_proj`/`k_proj`/`v_proj`, `attn_out`, a SwiGLU
feed-forward `ff_out(silu(ff_proj(x)) * up_proj(x))`, full rotary. Logits are not shifted.
The output head is `transformer.ff_out` (or the embedding when `weight_tying`); its size is
`embedding_size` (>= `vocab_size`). No exact KV cache exists for a bidirectional model: the
decoder (`engine.decoding.decode_bidir`) uses an approximate cache refreshed at block boundaries.

Checkpoint names: `model.transformer.wte.weight`, `model.transformer.blocks.N.q_proj.weight`,
..., `model.transformer.ln_f.weight`, `model.transformer.ff_out.weight`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch.nn.functional as F
from torch import Tensor, nn

from engine.model import native
from engine.model.adapters.common import (
    AdapterModel,
    CacheAt,
    RMSNorm,
    Rope,
    apply_rope,
    attend,
    known_keys,
)
from engine.model.kv_cache import KVCache
from engine.model.native import ModelConfig, SpecialTokens

MODEL_TYPES = ("llada",)
ARCHITECTURES = ("LLaDAModelLM",)


@dataclass(frozen=True)
class LLaDAConfig:
    """The config.json keys this adapter reads (defaults: LLaDA-8B)."""

    d_model: int = 4096
    n_heads: int = 32
    n_kv_heads: int | None = None
    n_layers: int = 32
    mlp_hidden_size: int = 12288
    vocab_size: int = 126464
    embedding_size: int | None = 126464
    rms_norm_eps: float = 1e-5
    rope: bool = True
    rope_theta: float = 500000.0
    max_sequence_length: int = 4096
    include_bias: bool = False
    include_qkv_bias: bool = False
    weight_tying: bool = False
    block_type: str = "llama"
    layer_norm_type: str = "rms"
    activation_type: str = "silu"
    attention_layer_norm: bool = False
    scale_logits: bool = False
    alibi: bool = False
    multi_query_attention: bool | None = None
    input_emb_norm: bool = False  # embeddings scaled by sqrt(d_model)
    bias_for_layer_norm: bool | None = None  # None: include_bias
    layer_norm_with_affine: bool = True
    block_group_size: int = 1
    block_size: int = 32  # decoding block of the approximate cache (Fast-dLLM's default)

    @classmethod
    def from_hf(cls, d: dict[str, Any]) -> LLaDAConfig:
        cfg = cls(**known_keys(cls, d))
        unsupported = {
            "block_type": (cfg.block_type, "llama"), "layer_norm_type": (cfg.layer_norm_type, "rms"),
            "activation_type": (cfg.activation_type, "silu"), "attention_layer_norm": (cfg.attention_layer_norm, False),
            "alibi": (cfg.alibi, False), "rope": (cfg.rope, True), "layer_norm_with_affine": (cfg.layer_norm_with_affine, True),
            "block_group_size": (cfg.block_group_size, 1), "layer norm bias": (cfg.norm_bias, False),
        }
        for key, (got, want) in unsupported.items():
            if got != want:
                raise ValueError(f"llada: {key}={got!r} is not supported (only {want!r})")
        cfg.kv_heads  # noqa: B018 - raises on contradictory head counts
        return cfg

    @property
    def norm_bias(self) -> bool:
        return bool(self.include_bias if self.bias_for_layer_norm is None else self.bias_for_layer_norm)

    @property
    def kv_heads(self) -> int:
        """The published `effective_n_kv_heads`: multi_query_attention means one head."""
        if self.multi_query_attention is None:
            return self.n_kv_heads or self.n_heads
        want = 1 if self.multi_query_attention else self.n_heads
        if self.n_kv_heads not in (None, want):
            raise ValueError(f"llada: n_kv_heads={self.n_kv_heads} contradicts multi_query_attention="
                             f"{self.multi_query_attention}")
        return want

    @property
    def hd(self) -> int:
        return self.d_model // self.n_heads

    @property
    def vocab_out(self) -> int:
        return self.embedding_size or self.vocab_size


class Block(nn.Module):
    """One LLaDA "llama" block; it is its own attention module (the cache lives on it)."""

    def __init__(self, c: LLaDAConfig) -> None:
        super().__init__()
        self.c = c
        qkv_bias = c.include_bias or c.include_qkv_bias
        self.attn_norm = RMSNorm(c.d_model, c.rms_norm_eps)
        self.q_proj = nn.Linear(c.d_model, c.d_model, bias=qkv_bias)
        self.k_proj = nn.Linear(c.d_model, c.kv_heads * c.hd, bias=qkv_bias)
        self.v_proj = nn.Linear(c.d_model, c.kv_heads * c.hd, bias=qkv_bias)
        self.attn_out = nn.Linear(c.d_model, c.d_model, bias=c.include_bias)
        self.ff_norm = RMSNorm(c.d_model, c.rms_norm_eps)
        self.ff_proj = nn.Linear(c.d_model, c.mlp_hidden_size, bias=c.include_bias)
        self.up_proj = nn.Linear(c.d_model, c.mlp_hidden_size, bias=c.include_bias)
        self.ff_out = nn.Linear(c.mlp_hidden_size, c.d_model, bias=c.include_bias)
        self.kv_cache: KVCache | None = None

    @property
    def attention(self) -> Block:
        return self

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, mask: Tensor | None, cache_at: CacheAt) -> Tensor:
        c, (B, T, _) = self.c, x.shape
        h = self.attn_norm(x)
        q = apply_rope(self.q_proj(h).view(B, T, c.n_heads, c.hd), cos, sin)
        k = apply_rope(self.k_proj(h).view(B, T, c.kv_heads, c.hd), cos, sin)
        v = self.v_proj(h).view(B, T, c.kv_heads, c.hd)
        x = x + self.attn_out(attend(q, k, v, mask, self.kv_cache, cache_at))
        h = self.ff_norm(x)
        return x + self.ff_out(F.silu(self.ff_proj(h)) * self.up_proj(h))


class LLaDABackbone(nn.Module):
    def __init__(self, c: LLaDAConfig) -> None:
        super().__init__()
        parts: dict[str, nn.Module] = {
            "wte": native.embedding(c.vocab_out, c.d_model),
            "blocks": nn.ModuleList(Block(c) for _ in range(c.n_layers)),
            "ln_f": RMSNorm(c.d_model, c.rms_norm_eps),
        }
        if not c.weight_tying:
            parts["ff_out"] = nn.Linear(c.d_model, c.vocab_out, bias=c.include_bias)
        self.transformer = nn.ModuleDict(parts)


class LLaDAModel(AdapterModel):
    def __init__(self, c: LLaDAConfig, special: SpecialTokens) -> None:
        super().__init__()
        self.args = c
        self.model = LLaDABackbone(c)
        self.rope = Rope(c.hd, c.rope_theta)
        self.cache_batch = 0
        self.config = ModelConfig(
            vocab_size=c.vocab_out, n_layer=c.n_layers, n_head=c.n_heads, n_kv_head=c.kv_heads,
            dim=c.d_model, intermediate_size=c.mlp_hidden_size, rope_base=c.rope_theta,
            norm_eps=c.rms_norm_eps, max_seq_len=c.max_sequence_length, block_size=c.block_size,
            attention="bidirectional", shift_logits=False, tie_embeddings=c.weight_tying, special=special)

    def embed(self, idx: Tensor) -> Tensor:
        x = self.model.transformer["wte"](idx)
        return x * self.args.d_model ** 0.5 if self.args.input_emb_norm else x

    def decoder_layers(self) -> nn.ModuleList:
        return self.model.transformer["blocks"]  # type: ignore[return-value]

    def final(self, x: Tensor) -> Tensor:
        h = self.model.transformer["ln_f"](x)
        out = self.output
        logits = F.linear(h, out.weight) if self.args.weight_tying else out(h)  # type: ignore[arg-type]
        return logits / math.sqrt(self.args.d_model) if self.args.scale_logits else logits

    def head_dims(self) -> tuple[int, int]:
        return self.args.kv_heads, self.args.hd

    @property
    def output(self) -> nn.Module:
        t = self.model.transformer
        return t["wte"] if self.args.weight_tying else t["ff_out"]


def build(hf: dict[str, Any], special: SpecialTokens) -> LLaDAModel:
    return LLaDAModel(LLaDAConfig.from_hf(hf), special)
