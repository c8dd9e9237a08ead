"""The native attention rotates queries and keys in one pass, from whole-width tables built
once a forward (issue 50, fewer small ops a layer): its logits are bit-identical to rotating
them one after the other with `apply_rope`, cached and not, for float32 and bfloat16, on the
embedded model's shape."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor

from engine.model.checkpoint import EMBEDDED_DIR, load_checkpoint
from engine.model.native import Attention, CacheAt, Transformer, apply_rope


def two_pass_forward(self: Attention, x: Tensor, cos: Tensor, sin: Tensor, mask: Tensor | None,
                     cache_at: CacheAt | None) -> Tensor:
    """The attention as it was: queries, then keys, rotated apart."""
    c, (B, T, _) = self.c, x.shape
    hd = c.head_dim
    cos, sin = cos[:, :, 0, : hd // 2], sin[:, :, 0, hd // 2 :]  # the half tables of `rope_pair`'s
    q, k, v = self.wqkv(x).split([c.n_head * hd, c.n_kv_head * hd, c.n_kv_head * hd], dim=-1)
    q = apply_rope(q.view(B, T, c.n_head, hd), cos, sin)
    k = apply_rope(k.view(B, T, c.n_kv_head, hd), cos, sin)
    v = v.view(B, T, c.n_kv_head, hd)
    if self.kv_cache is not None and cache_at is not None:
        rows, slots, kv_len, runs, _span = cache_at
        self.kv_cache.write(rows, slots, k, v)  # index_put, as it was
        ck, cv = self.kv_cache.k, self.kv_cache.v
        parts = [self._attend(q[a:b], ck[r: r + b - a, :kv_len], cv[r: r + b - a, :kv_len],
                              None if mask is None else mask[a:b]) for a, b, r in runs]
        y = parts[0] if len(parts) == 1 else torch.cat(parts)
    else:
        y = self._attend(q, k, v, mask)
    return self.wo(y.transpose(1, 2).reshape(B, T, c.n_head * hd))


def logits(model: Transformer, ids: Tensor, pos: Tensor) -> tuple[Tensor, Tensor]:
    """(uncached, cached: a prompt written, then a block reading it) logits."""
    with torch.no_grad():
        full = model(ids, pos)
        model.setup_cache(1, 256)
        n = ids.shape[1] // 2
        model(ids[:, :n], pos[:, :n], rows=torch.tensor([0]), kv_len=n)
        cached = model(ids[:, n:], pos[:, n:], rows=torch.tensor([0]), kv_len=ids.shape[1])
        model.drop_cache()
    return full, cached


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_one_rotary_pass_is_bit_identical_to_two(dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch) -> None:
    model = load_checkpoint(EMBEDDED_DIR).to(dtype).eval()
    g = torch.Generator().manual_seed(5)
    ids = torch.randint(0, model.config.vocab_size, (1, 48), generator=g)
    pos = torch.arange(48)[None]
    fused = logits(model, ids, pos)
    monkeypatch.setattr(Attention, "forward", two_pass_forward)
    apart = logits(model, ids, pos)
    for a, b in zip(fused, apart, strict=True):
        assert a.dtype == b.dtype and torch.equal(a, b)
