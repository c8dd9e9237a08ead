"""A block decoding alone (an editor's request: one cache row, consecutive slots, every key
visible) takes the short ways through the native model (issue 50): two slice copies instead
of an index_put into the KV cache, and no attention bias. Their logits and cache are the
same bits as the general way's, for float32 and bfloat16; a step that is not one row, or
whose slots are not consecutive, or whose mask hides a key, still takes the general way."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor

from engine.model import native
from engine.model.checkpoint import EMBEDDED_DIR, load_checkpoint
from engine.model.kv_cache import KVCache, span_of
from engine.model.native import Transformer, all_visible


def step(model: Transformer, prompt: int, block: int) -> tuple[Tensor, Tensor]:
    """(logits of a block read over a cached prompt, the first layer's cached keys)."""
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(8, model.config.vocab_size, (1, prompt + block), generator=g)
    pos = torch.arange(prompt + block)[None]
    row = torch.tensor([1])
    model.setup_cache(2, 128)
    with torch.no_grad():
        model(ids[:, :prompt], pos[:, :prompt], rows=row, kv_len=prompt)
        out = model(ids[:, prompt:], pos[:, prompt:], torch.ones(1, 1, block, prompt + block, dtype=torch.bool),
                    rows=row, kv_len=prompt + block)
    keys = model.kv_caches()[0].k.clone()
    model.drop_cache()
    return out, keys


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_one_row_step_is_bit_identical_to_the_general_way(dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch) -> None:
    model = load_checkpoint(EMBEDDED_DIR).to(dtype).eval()
    short = step(model, 40, model.config.block_size)
    seen: list[object] = []
    monkeypatch.setattr(native, "span_of", lambda rows, slots: seen.append(rows) or None)
    monkeypatch.setattr(native, "all_visible", lambda mask: False)
    general = step(model, 40, model.config.block_size)
    assert seen, "the general way was not taken"
    for a, b in zip(short, general, strict=True):
        assert a.dtype == b.dtype and torch.equal(a, b)
    assert short[1][1, :56].abs().sum() > 0 and not short[1][0].any()  # written on row 1 only


def test_span_of_names_one_row_of_consecutive_slots_only() -> None:
    assert span_of(torch.tensor([3]), torch.tensor([[7, 8, 9]])) == (3, 7)
    assert span_of(torch.tensor([3]), torch.tensor([[7, 9, 10]])) is None
    assert span_of(torch.tensor([3]), torch.tensor([[7, 7]])) is None
    assert span_of(torch.tensor([0, 1]), torch.tensor([[0, 1], [0, 1]])) is None


def test_a_mask_that_hides_a_key_is_kept() -> None:
    mask = torch.ones(1, 1, 4, 9, dtype=torch.bool)
    assert all_visible(mask)
    mask[0, 0, 2, 5] = False
    assert not all_visible(mask)


def test_a_span_write_lands_where_an_index_put_does() -> None:
    g = torch.Generator().manual_seed(0)
    k, v = torch.randn(1, 5, 2, 4, generator=g), torch.randn(1, 5, 2, 4, generator=g)
    by_span, by_index = KVCache(3, 16, 2, 4, torch.bfloat16, "cpu"), KVCache(3, 16, 2, 4, torch.bfloat16, "cpu")
    rows, slots = torch.tensor([2]), torch.arange(6, 11)[None]
    by_span.write(rows, slots, k, v, span_of(rows, slots))
    by_index.write(rows, slots, k, v)
    assert torch.equal(by_span.k, by_index.k) and torch.equal(by_span.v, by_index.v)
    assert by_span.k[2, 6:11].any() and not by_span.k[:, :6].any()


def test_the_float32_norm_is_the_general_norm_bit_for_bit() -> None:
    norm = native.RMSNorm(256, 1e-5)
    with torch.no_grad():
        norm.weight.copy_(torch.randn(256, generator=torch.Generator().manual_seed(1)))
    x = torch.randn(3, 17, 256, generator=torch.Generator().manual_seed(2)) * 4
    general = norm.scale(x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + norm.eps), x)
    assert torch.equal(norm(x), general)
