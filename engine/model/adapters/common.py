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

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from engine.model.native import KVCache, ModelConfig

# (rows [B], slots [B, T], kv_len, rows[0] when the rows are consecutive, else None)
CacheAt = tuple[Tensor, Tensor, int, int | None] | None


class RMSNorm(nn.Module):
    """Hugging Face's RMSNorm: normalise in fp32, cast back, then scale (parameter `weight`)."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: Tensor) -> Tensor:
        xf = x.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
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


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """x: [B, T, H, D]; cos/sin: [B, T, R/2]. Rotates the first R channels, passes the rest."""
    r = 2 * cos.shape[-1]
    xr, xp = x[..., :r].float(), x[..., r:]
    x1, x2 = xr.chunk(2, dim=-1)
    c, s = cos[:, :, None, :], sin[:, :, None, :]
    rot = torch.cat([x1 * c - x2 * s, x1 * s + x2 * c], dim=-1).to(x.dtype)
    return torch.cat([rot, xp], dim=-1) if xp.shape[-1] else rot


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


class AdapterModel(nn.Module):
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

    def setup_cache(self, batch: int, max_len: int | None = None) -> None:
        n_kv, hd = self.head_dims()
        w: Tensor = self.output.weight  # type: ignore[assignment]
        for layer in self.decoder_layers():
            layer.attention.kv_cache = KVCache(batch, max_len or self.config.max_seq_len, n_kv, hd,  # type: ignore[union-attr]
                                               w.dtype, w.device)
        self.cache_batch = batch

    def kv_caches(self) -> list[KVCache]:
        out: list[KVCache] = []
        for layer in self.decoder_layers():
            c = layer.attention.kv_cache  # type: ignore[union-attr]
            if not isinstance(c, KVCache):
                raise RuntimeError("setup_cache() first")
            out.append(c)
        return out

    @property
    def cache_len(self) -> int:
        return int(self.kv_caches()[0].k.shape[1])

    def drop_cache(self) -> None:
        for layer in self.decoder_layers():
            layer.attention.kv_cache = None  # type: ignore[union-attr]
        self.cache_batch = 0

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
