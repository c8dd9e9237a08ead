"""Pieces shared by the native adapters: the engine-facing forward, KV cache, RoPE, RMSNorm.

Every adapter keeps the module tree of its family's public checkpoint, so the safetensors
names load as they are (meta-device construction, then `assign`). On top of that tree an
adapter exposes what the decoder drives (the same contract as `engine.model.native.Transformer`):

    forward(idx, pos, mask, rows=, slots=, kv_len=, logits_at=) -> float logits
    setup_cache(batch, max_len) / drop_cache() / kv_caches() / cache_len
    config   an `engine.model.native.ModelConfig` view (attention regime, block, shift, special ids)
    layers   decoder layers, each with `.attention.kv_cache` (the prompt cache copies those)
    output   the vocabulary projection (its weight names the device)
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from engine.model import native
from engine.model.kv_cache import KVCache
from engine.model.native import ModelConfig, SpecialTokens
from engine.model.native import apply_rope as apply_rope  # re-exported (partial rotary too)

# (rows [B], slots [B, T], kv_len, rows[0] when the rows are consecutive, else None)
CacheAt = tuple[Tensor, Tensor, int, int | None] | None


class RMSNorm(native.RMSNorm):
    """Hugging Face's RMSNorm: normalise in fp32, cast back, then scale (parameter `weight`)."""

    def scale(self, y: Tensor, x: Tensor) -> Tensor:
        return self.weight * y.to(x.dtype)


class Rope:
    """cos/sin tables over the first `rot_dim` channels of a head (partial rotary when
    rot_dim < head_dim), in the half-split layout of Hugging Face's `rotate_half`; grown on
    demand and kept on the device of the positions."""

    def __init__(self, rot_dim: int, base: float) -> None:
        self.rot_dim, self.base = rot_dim, base
        self.cos: Tensor | None = None
        self.sin: Tensor | None = None

    def tables(self, pos: Tensor) -> tuple[Tensor, Tensor]:
        need = int(pos.max()) + 1 if pos.numel() else 1
        if self.cos is None or self.cos.shape[0] < need or self.cos.device != pos.device:
            n = max(1024, 1 << (need - 1).bit_length())
            d = self.rot_dim
            inv = 1.0 / (self.base ** (torch.arange(0, d, 2, dtype=torch.float32, device=pos.device) / d))
            ang = torch.outer(torch.arange(n, dtype=torch.float32, device=pos.device), inv)
            self.cos, self.sin = torch.cos(ang), torch.sin(ang)
        assert self.sin is not None
        return self.cos[pos], self.sin[pos]


def attend(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, cache: KVCache | None,
           cache_at: CacheAt) -> Tensor:
    """Grouped-query attention of q [B, T, H, D] over k/v [B, T, Hkv, D] (plus the cache row
    when `cache_at` is given). mask: bool [B, 1, T, S], True = may attend; None = all."""
    B, T, H, D = q.shape
    if cache is not None and cache_at is not None:
        rows, slots, kv_len, first = cache_at
        cache.write(rows, slots, k, v)
        if first is not None:  # consecutive cache rows: views, no copy (read back once a forward)
            k, v = cache.k[first: first + B, :kv_len], cache.v[first: first + B, :kv_len]
        else:
            k, v = cache.k[rows, :kv_len], cache.v[rows, :kv_len]
    rep = H // k.shape[2]
    qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2).to(q.dtype), v.transpose(1, 2).to(q.dtype)
    if rep > 1:
        kt, vt = kt.repeat_interleave(rep, dim=1), vt.repeat_interleave(rep, dim=1)
    y = F.scaled_dot_product_attention(qt, kt, vt, attn_mask=mask)
    return y.transpose(1, 2).reshape(B, T, H * D)


def consecutive_from(rows: Tensor) -> int | None:
    """rows[0] when `rows` are rows[0], rows[0] + 1, ...; else None. One read-back a forward
    (`KVCache.update` reads the rows back twice in every layer)."""
    n = rows.numel()
    run = (rows == rows[0] + torch.arange(n, device=rows.device)).all()
    r0, ok = torch.stack([rows[0], run.to(rows.dtype)]).tolist()
    return int(r0) if ok else None


class AdapterModel(native.CachedModel):
    """Engine-facing base: subclasses build the checkpoint's module tree and implement
    `embed`, `decoder_layers`, `final` (norm + head) and `head_dims` (kv heads, head dim)."""

    config: ModelConfig
    rope: Rope
    # buffers a checkpoint may omit (name suffixes), filled with zeros when absent
    optional_buffers: tuple[str, ...] = ()

    def embed(self, idx: Tensor) -> Tensor:
        raise NotImplementedError

    def decoder_layers(self) -> nn.ModuleList:
        raise NotImplementedError

    def final(self, x: Tensor) -> Tensor:
        raise NotImplementedError

    def head_dims(self) -> tuple[int, int]:
        raise NotImplementedError

    @property
    def output(self) -> nn.Module:
        raise NotImplementedError

    def tie_weights(self) -> None:
        """Re-tie a shared embedding/head after the checkpoint tensors were assigned."""

    def route_groups(self, pos: Tensor) -> Tensor | None:
        """Token groups a block-routed MoE routes together (LLaDA2.2); None: no block routing."""
        return None

    @property
    def layers(self) -> nn.ModuleList:
        return self.decoder_layers()

    def attentions(self) -> list[Any]:
        return [layer.attention for layer in self.decoder_layers()]

    def forward(self, idx: Tensor, pos: Tensor, mask: Tensor | None = None, *,
                rows: Tensor | None = None, slots: Tensor | None = None, kv_len: int | None = None,
                logits_at: Tensor | None = None) -> Tensor:
        """As `engine.model.native.Transformer.forward`: [B, T] ids and positions, bool mask
        [B, 1, T, S] or None; with `rows`, k/v go to the cache and attention reads its first
        `kv_len` slots; `logits_at` [B, K] picks the positions projected to the vocabulary."""
        x = self.embed(idx)
        cos, sin = self.rope.tables(pos)
        cache_at: CacheAt = None
        if rows is not None:
            cache_at = (rows, slots if slots is not None else pos, kv_len or int(pos.max()) + 1,
                        consecutive_from(rows))
        groups = self.route_groups(pos)
        for layer in self.decoder_layers():
            x = layer(x, cos, sin, mask, cache_at) if groups is None else layer(x, cos, sin, mask, cache_at, groups)
        if logits_at is not None:
            x = torch.gather(x, 1, logits_at[:, :, None].expand(-1, -1, x.shape[-1]))
        return self.final(x).float()


def known_keys(config_cls: type, d: dict[str, Any]) -> dict[str, Any]:
    """The entries of a config.json `d` that name fields of the dataclass `config_cls`."""
    names = {f.name for f in fields(config_cls)}
    return {k: v for k, v in d.items() if k in names}


def check_silu_unscaled(family: str, hidden_act: str, rope_scaling: dict[str, Any] | None) -> None:
    """Refuse what the Qwen2-shaped adapters (Dream, LLaDA2) do not implement: an activation
    other than SiLU, scaled rotary positions."""
    if hidden_act != "silu":
        raise ValueError(f"{family}: hidden_act {hidden_act!r} is not supported (silu only)")
    if rope_scaling and rope_scaling.get("rope_type", rope_scaling.get("type")) not in (None, "default"):
        raise ValueError(f"{family}: rope_scaling {rope_scaling} is not supported")


class MLP(nn.Module):
    """The SwiGLU feed-forward of Qwen2-shaped checkpoints (`gate_proj`, `up_proj`, `down_proj`)."""

    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(dim, hidden, bias=False)
        self.up_proj = nn.Linear(dim, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class HeadedModel(AdapterModel):
    """An adapter laid out as Qwen2-shaped checkpoints are (Dream, LLaDA2): `model` holds the
    embedding (`embedding()`), `layers` and the final `norm`; `lm_head` projects; `args` is the
    config dataclass with the Hugging Face names (`num_key_value_heads`, `hd`,
    `tie_word_embeddings`, ...)."""

    args: Any
    model: Any  # the checkpoint's `model` module
    lm_head: nn.Linear

    def embedding(self) -> nn.Embedding:
        raise NotImplementedError

    def model_config(self, *, attention: str, shift_logits: bool, special: SpecialTokens) -> ModelConfig:
        """The engine's `ModelConfig` view of `args`."""
        c = self.args
        return ModelConfig(
            vocab_size=c.vocab_size, n_layer=c.num_hidden_layers, n_head=c.num_attention_heads,
            n_kv_head=c.num_key_value_heads, dim=c.hidden_size, intermediate_size=c.intermediate_size,
            rope_base=c.rope_theta, norm_eps=c.rms_norm_eps, max_seq_len=c.max_position_embeddings,
            block_size=c.block_size, attention=attention, shift_logits=shift_logits,
            tie_embeddings=c.tie_word_embeddings, special=special)

    def tie_head(self) -> None:
        if self.args.tie_word_embeddings:
            self.lm_head.weight = self.embedding().weight

    def tie_weights(self) -> None:
        self.tie_head()

    def embed(self, idx: Tensor) -> Tensor:
        return self.embedding()(idx)

    def decoder_layers(self) -> nn.ModuleList:
        return self.model.layers  # type: ignore[return-value]

    def final(self, x: Tensor) -> Tensor:
        return self.lm_head(self.model.norm(x))

    def head_dims(self) -> tuple[int, int]:
        return self.args.num_key_value_heads, self.args.hd

    @property
    def output(self) -> nn.Module:
        return self.lm_head
