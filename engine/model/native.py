"""The native block-diffusion transformer (one file, gpt-fast style).

RMSNorm, rotary embeddings, grouped-query attention and SwiGLU. Attention is described by
one integer per position, its *block id*: a query may read a key whose block id is lower or
equal. A causal token's block id is its own position; every token of a diffusion block
shares the block's start position. So the prompt and the committed blocks are causal (an
exact, prefix-reusable KV cache) while the active block is bidirectional and reads all of the
clean context before it. `attention="bidirectional"` lets every position read every other.

With `shift_logits=True` (the embedded model, Dream) the logits at position i predict the
token at position i + 1, as in an autoregressive model; otherwise (LLaDA) they predict the
token at position i itself.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from engine.model.kv_cache import KVCache, Run, Span, row_runs, span_of
from engine.model.special import SpecialTokens as SpecialTokens  # re-exported


@dataclass(frozen=True)
class ModelConfig:
    vocab_size: int = 4096
    n_layer: int = 6
    n_head: int = 8
    n_kv_head: int = 2
    dim: int = 256
    intermediate_size: int = 704
    rope_base: float = 10000.0
    norm_eps: float = 1e-5
    max_seq_len: int = 2048
    block_size: int = 16
    attention: str = "block_causal"  # or "bidirectional"
    shift_logits: bool = True
    tie_embeddings: bool = True
    special: SpecialTokens = field(
        default_factory=lambda: SpecialTokens(
            mask=4, end_of_text=1, end_of_middle=2, pad=0, fim_prefix=5, fim_suffix=6, fim_middle=3
        )
    )

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_head

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ModelConfig:
        known = {f for f in cls.__dataclass_fields__}
        kw = {k: v for k, v in d.items() if k in known}
        if isinstance(kw.get("special"), dict):
            kw["special"] = SpecialTokens(**kw["special"])
        return cls(**kw)


# Named presets. The embedded model's special ids follow its tokenizer's added tokens.
PRESETS: dict[str, ModelConfig] = {
    "tiny-code": ModelConfig(),
    "test-tiny": ModelConfig(
        vocab_size=64, n_layer=2, n_head=4, n_kv_head=2, dim=32, intermediate_size=64,
        max_seq_len=256, block_size=4,
    ),
    # The GPU-trained larger variant of the embedded model (17.3M parameters, 35 MB in bfloat16).
    "mini-code": ModelConfig(n_layer=10, n_head=6, n_kv_head=2, dim=384, intermediate_size=1024),
    "small-code": ModelConfig(n_layer=12, n_head=12, n_kv_head=4, dim=768, intermediate_size=2048,
                              vocab_size=4096, max_seq_len=4096, block_size=32),
}


def preset(name: str, **overrides: Any) -> ModelConfig:
    return replace(PRESETS[name], **overrides)


class RMSNorm(nn.Module):
    """Normalise in fp32, scale in fp32, cast back (`scale`; the adapters' Hugging Face
    variant casts back before it scales: engine.model.adapters.common.RMSNorm)."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: Tensor) -> Tensor:
        if x.dtype == torch.float32 and self.weight.dtype == torch.float32:
            # nothing to cast, so the two orders agree: torch's one call for the six below, the
            # same bits (tests/engine/model/test_one_row_step.py); 13 a decode step of tiny-code
            return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)
        xf = x.float()
        return self.scale(xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps), x)

    def scale(self, y: Tensor, x: Tensor) -> Tensor:
        """y: the normalised fp32 input; x: the input (its dtype is the output's)."""
        return (y * self.weight.float()).type_as(x)


def rope_tables(head_dim: int, max_len: int, base: float) -> tuple[Tensor, Tensor]:
    inv = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    ang = torch.outer(torch.arange(max_len, dtype=torch.float32), inv)
    return torch.cos(ang), torch.sin(ang)


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """x: [B, T, H, D]; cos/sin: [B, T, R/2] gathered at each token's position. Rotates the
    first R channels in the half-split layout (Hugging Face's `rotate_half`) and passes the
    rest (partial rotary, R < D: LLaDA2)."""
    r = 2 * cos.shape[-1]
    x1, x2 = (x if r == x.shape[-1] else x[..., :r]).float().chunk(2, dim=-1)
    c, s = cos[:, :, None, :], sin[:, :, None, :]
    rot = torch.cat([x1 * c - x2 * s, x1 * s + x2 * c], dim=-1).type_as(x)
    return rot if r == x.shape[-1] else torch.cat([rot, x[..., r:]], dim=-1)


def rope_pair(cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor]:
    """cos/sin [B, T, D/2] -> the whole-width tables [B, T, 1, D] that `rotate` reads:
    [cos, cos] and [-sin, sin]. Built once a forward, shared by every layer."""
    return torch.cat([cos, cos], -1)[:, :, None], torch.cat([-sin, sin], -1)[:, :, None]


def rotate(x: Tensor, cos2: Tensor, sin2: Tensor) -> Tensor:
    """`apply_rope` over the whole head width from `rope_pair`'s tables, in four kernels instead
    of seven: x * [c, c] + [x2, x1] * [-s, s]. The same products and sums as `apply_rope`
    (a - b is a + (-b) in IEEE arithmetic), so the same bits."""
    B, T, H, D = x.shape
    xf = x.float()
    swapped = xf.view(B, T, H, 2, D // 2).flip(3).view(B, T, H, D)
    return (xf * cos2 + swapped * sin2).type_as(x)


def embedding(rows: int, dim: int) -> nn.Embedding:
    """An embedding table. Built under `torch.device("meta")` (the loaders: the weights are
    assigned afterwards) it skips the random init, whose meta kernel imports torch._dynamo:
    1.3 s of every cold start (bench/step_work.py `cold_start`)."""
    if torch.get_default_device().type == "meta":
        return nn.Embedding(rows, dim, _weight=torch.empty(rows, dim))
    return nn.Embedding(rows, dim)


# How a masked attention call with fewer key/value heads than query heads runs. "native":
# SDPA's enable_gqa, no copies (the CPU's flash kernel takes it with a mask). "expand": the
# keys and values repeated to every query head first. On CUDA, SDPA's fused kernels refuse
# enable_gqa together with a mask, so "native" falls back to the math kernel, which writes the
# whole [B, heads, T, S] score matrix in float32; "expand" keeps the memory-efficient kernel.
# The trainer times both on its device (engine/train/speed.py).
GQA_MODES = ("native", "expand")

CacheAt = tuple[Tensor, Tensor, int, list[Run], Span]  # rows [B], slots [B, T], kv_len, row_runs, span_of


class Attention(nn.Module):
    def __init__(self, c: ModelConfig) -> None:
        super().__init__()
        self.c = c
        hd = c.head_dim
        self.wqkv = nn.Linear(c.dim, (c.n_head + 2 * c.n_kv_head) * hd, bias=False)
        self.wo = nn.Linear(c.n_head * hd, c.dim, bias=False)
        self.kv_cache: KVCache | None = None
        self.gqa: str = "native"  # see GQA_MODES

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, mask: Tensor | None,
                cache_at: CacheAt | None) -> Tensor:
        c, (B, T, _) = self.c, x.shape
        hd = c.head_dim
        qk, v = F.linear(x, self.wqkv.weight).split([(c.n_head + c.n_kv_head) * hd, c.n_kv_head * hd], dim=-1)
        # queries and keys rotated in one pass (the same element-wise ops as two: bit-identical,
        # half the small ops of a layer's rotary on a small model)
        q, k = rotate(qk.reshape(B, T, -1, hd), cos, sin).split([c.n_head, c.n_kv_head], 2)
        v = v.view(B, T, -1, hd)
        cache = self.kv_cache
        if cache is not None and cache_at is not None:
            rows, slots, kv_len, runs, span = cache_at
            cache.write(rows, slots, k, v, span)
            ck, cv = cache.k, cache.v
            if len(runs) == 1:  # consecutive cache rows: one view, the mask whole
                r = runs[0][2]
                y = self._attend(q, ck[r : r + B, :kv_len], cv[r : r + B, :kv_len], mask)
            else:
                y = torch.cat([self._attend(q[a:b], ck[r : r + b - a, :kv_len], cv[r : r + b - a, :kv_len],
                                            None if mask is None else mask[a:b]) for a, b, r in runs])
        else:
            y = self._attend(q, k, v, mask)
        return F.linear(y.transpose(1, 2).reshape(B, T, -1), self.wo.weight)

    def _attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> Tensor:
        """q [B, T, H, D] over k/v [B, S, Hkv, D] -> [B, H, T, D]."""
        c, (B, T, _, hd) = self.c, q.shape
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        if k.dtype != q.dtype:  # a cache kept in another dtype
            k, v = k.to(q.dtype), v.to(q.dtype)
        if mask is not None and mask.dtype != torch.bool:
            # an additive bias for the query heads folded onto their key/value head (see
            # `folded_bias`): one attention per kv head, its g query heads as g*T rows
            g = c.n_head // c.n_kv_head
            return F.scaled_dot_product_attention(q.reshape(B, c.n_kv_head, g * T, hd), k, v,
                                                  attn_mask=mask).view(B, c.n_head, T, hd)
        if self.gqa == "expand" and c.n_head != c.n_kv_head:
            g = c.n_head // c.n_kv_head  # query head h reads key/value head h // g, as enable_gqa maps them
            return F.scaled_dot_product_attention(q, k.repeat_interleave(g, 1), v.repeat_interleave(g, 1),
                                                  attn_mask=mask)
        # grouped-query attention without materialising repeated keys/values
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=c.n_head != c.n_kv_head)


class FeedForward(nn.Module):
    def __init__(self, c: ModelConfig) -> None:
        super().__init__()
        self.w13 = nn.Linear(c.dim, 2 * c.intermediate_size, bias=False)
        self.w2 = nn.Linear(c.intermediate_size, c.dim, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        gate, up = F.linear(x, self.w13.weight).chunk(2, dim=-1)
        return F.linear(F.silu(gate) * up, self.w2.weight)


class Block(nn.Module):
    def __init__(self, c: ModelConfig) -> None:
        super().__init__()
        self.attention_norm = RMSNorm(c.dim, c.norm_eps)
        self.attention = Attention(c)
        self.ffn_norm = RMSNorm(c.dim, c.norm_eps)
        self.feed_forward = FeedForward(c)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, mask: Tensor | None,
                cache_at: CacheAt | None) -> Tensor:
        x = x + self.attention(self.attention_norm(x), cos, sin, mask, cache_at)
        return x + self.feed_forward(self.ffn_norm(x))


class CachedModel(nn.Module):
    """The KV-cache half of the decoder's model contract, shared with the checkpoint adapters
    (engine.model.adapters.common.AdapterModel): one `KVCache` per attention module, which
    `attentions()` lists; `head_dims()` gives (kv heads, head dim); `output` names the device."""

    config: ModelConfig
    cache_batch: int = 0

    def attentions(self) -> list[Any]:
        raise NotImplementedError

    def head_dims(self) -> tuple[int, int]:
        return self.config.n_kv_head, self.config.head_dim

    def setup_cache(self, batch: int, max_len: int | None = None) -> None:
        n_kv, hd = self.head_dims()
        w: Tensor = self.output.weight  # type: ignore[assignment,union-attr]
        for a in self.attentions():
            a.kv_cache = KVCache(batch, max_len or self.config.max_seq_len, n_kv, hd, w.dtype, w.device)
        self.cache_batch = batch

    def kv_caches(self) -> list[KVCache]:
        out: list[KVCache] = []
        for a in self.attentions():
            if not isinstance(a.kv_cache, KVCache):
                raise RuntimeError("setup_cache() first")
            out.append(a.kv_cache)
        return out

    @property
    def cache_len(self) -> int:
        return int(self.kv_caches()[0].k.shape[1])

    def drop_cache(self) -> None:
        for a in self.attentions():
            a.kv_cache = None
        self.cache_batch = 0


class Transformer(CachedModel):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = c = config
        self.tok_embeddings = embedding(c.vocab_size, c.dim)
        self.layers = nn.ModuleList(Block(c) for _ in range(c.n_layer))
        self.norm = RMSNorm(c.dim, c.norm_eps)
        self.output = nn.Linear(c.dim, c.vocab_size, bias=False)
        if c.tie_embeddings:
            self.output.weight = self.tok_embeddings.weight
        self._rope: tuple[Tensor, Tensor] | None = None  # built on first use, on the right device
        self.cache_batch = 0

    def rope(self, device: torch.device) -> tuple[Tensor, Tensor]:
        if self._rope is None or self._rope[0].device != device:
            c = self.config
            cos, sin = rope_tables(c.head_dim, c.max_seq_len, c.rope_base)
            self._rope = (cos.to(device), sin.to(device))
        return self._rope

    def init_weights(self, seed: int = 0) -> None:
        g = torch.Generator().manual_seed(seed)
        for name, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * self.config.n_layer) if name.endswith(("wo.weight", "w2.weight")) else 0.02
                with torch.no_grad():
                    p.copy_(torch.randn(p.shape, generator=g) * std)

    def blocks(self) -> list[Block]:
        return [cast(Block, layer) for layer in self.layers]

    def set_gqa(self, mode: str) -> None:
        """How masked attention meets grouped-query heads (GQA_MODES); outputs are the same."""
        if mode not in GQA_MODES:
            raise ValueError(f"unknown GQA mode {mode!r}; known: {GQA_MODES}")
        for layer in self.blocks():
            layer.attention.gqa = mode

    def attentions(self) -> list[Any]:
        return [layer.attention for layer in self.blocks()]

    def forward(self, idx: Tensor, pos: Tensor, mask: Tensor | None = None, *,
                rows: Tensor | None = None, slots: Tensor | None = None, kv_len: int | None = None,
                logits_at: Tensor | None = None) -> Tensor:
        """idx, pos: [B, T] token ids and rotary positions. mask: bool [B, 1, T, S] (True = may
        attend) or None (everything). With a cache set up and `rows` given, keys/values are
        written at cache `rows` [B] / `slots` [B, T] (default: pos) and attention reads each
        row's first `kv_len` slots (S = kv_len); otherwise S = T. `logits_at` [B, K] projects
        only those positions to the vocabulary (a prefill needs one row, not thousands)."""
        x = self.tok_embeddings(idx)
        rc, rs = self.rope(idx.device)
        cos, sin = rope_pair(rc[pos], rs[pos])
        cache_at: CacheAt | None = None
        if rows is not None:
            slots = slots if slots is not None else pos
            cache_at = (rows, slots, kv_len or int(pos.max()) + 1, row_runs(rows.tolist()), span_of(rows, slots))
            if mask is not None and all_visible(mask):
                mask = None  # a block decoding alone: no bias to build or add
            if mask is not None:
                mask = folded_bias(mask, self.config.n_head // self.config.n_kv_head, x.dtype)
        for layer in self.layers:
            x = layer(x, cos, sin, mask, cache_at)
        if logits_at is not None:
            x = torch.gather(x, 1, logits_at[:, :, None].expand(-1, -1, x.shape[-1]))
        return self.output(self.norm(x)).float()


def all_visible(mask: Tensor) -> bool:
    """Whether a bool mask lets every query read every key, so attention needs none. Read on
    the CPU only (on an accelerator the read would wait for the device)."""
    return mask.device.type == "cpu" and bool(mask.all())


def folded_bias(mask: Tensor, groups: int, dtype: torch.dtype) -> Tensor:
    """bool [B, 1, T, S] -> additive [B, 1, groups*T, S]: 0 where a query may attend, the
    dtype's lowest value elsewhere (finite: a row with no key stays finite), repeated for
    the `groups` query heads that share a key/value head. Decoding with a cache attends
    that way: one kernel call per kv head over groups*T rows is faster than grouped-query
    attention on T rows (bf16 on an AMX CPU: 1.4x an 8-row decode step's attention)."""
    bias = torch.zeros(mask.shape, dtype=dtype, device=mask.device)
    bias.masked_fill_(~mask, torch.finfo(dtype).min)
    return bias.repeat(1, 1, groups, 1) if groups > 1 else bias


# Slot kinds of the attention layout (training batches and decode steps share it).
INVALID, CLEAN, NOISY = 0, 1, 2


def layout_mask(q_kind: Tensor, q_pos: Tensor, q_blk: Tensor,
                k_kind: Tensor, k_pos: Tensor, k_blk: Tensor, bidirectional: bool = False) -> Tensor:
    """[B, 1, T, S] attention of queries over keys, from per-token kind/position/block start.

    Clean tokens are causal; a noisy (diffusion) token reads the clean tokens before its
    block's start and the noisy tokens of its own block. Bidirectional: all valid keys.
    Padding queries (INVALID) read nothing: callers give them a key, or their rows are NaN.
    A clean token given a block start (blk >= 0; the default -1 keeps it token-causal) also
    reads the clean tokens of its own block: clean blocks that are bidirectional inside, as
    LLaDA2 treats its prompt and finished blocks (blocks aligned at position 0).
    """
    qk, kk = q_kind[:, :, None], k_kind[:, None, :]
    if bidirectional:
        m = (kk != INVALID) & (qk != INVALID)
    else:
        qp, kp = q_pos[:, :, None], k_pos[:, None, :]
        qb, kb = q_blk[:, :, None], k_blk[:, None, :]
        m = ((qk == CLEAN) & (kk == CLEAN) & ((kp <= qp) | ((qb >= 0) & (kb == qb)))) \
            | ((qk == NOISY) & (kk == CLEAN) & (kp < qb)) \
            | ((qk == NOISY) & (kk == NOISY) & (kb == qb))
    return m[:, None]
