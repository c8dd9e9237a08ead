"""LLaDA2.x adapter: real config keys and weight names load offline; MoE routing matches a
plain per-token reading of the spec; cached block-causal decoding equals LLaDA2's own
uncached recipe (the window up to the active block under the aligned block-tril mask)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from engine.decoding.batch import execute, new_slot_attrs
from engine.decoding.decode import Sequence
from engine.decoding.decode_bidir import make_sequence
from engine.decoding.policies import PRESETS, make_policy
from engine.model.adapters.llada2 import Gate, SparseMoe
from engine.model.loader import LoadedModel, load_model
from tests.engine.conftest import steps_alone
from tests.engine.model.adapters.tiny_ckpts import MASK, prompt_ids, write_llada2

BLOCK, MAX_LEN = 8, 256
ATOL = 1e-5  # fp32; cached and uncached paths differ only in summation order


@pytest.fixture(scope="module")
def llada2(tmp_path_factory: pytest.TempPathFactory) -> LoadedModel:
    lm = load_model(write_llada2(tmp_path_factory.mktemp("llada2")), dtype=torch.float32)
    lm.model.setup_cache(2, MAX_LEN)
    return lm


def official_mask(n: int, b: int) -> torch.Tensor:
    """LLaDA2's generate(): blocks of b from position 0, lower-triangular over blocks."""
    bid = torch.arange(n) // b
    return (bid[None, :] <= bid[:, None])[None, None]


def uncached(model: torch.nn.Module, window: list[int]) -> torch.Tensor:
    n = len(window)
    with torch.no_grad():
        return model(torch.tensor([window]), torch.arange(n)[None], official_mask(n, BLOCK))[0]


def test_loads_with_special_ids_from_the_tokenizer(llada2: LoadedModel) -> None:
    c = llada2.config
    assert llada2.family == "llada2" and llada2.cache == "exact"
    assert c.special.mask == MASK and c.attention == "block_causal" and not c.shift_logits
    assert all(not p.is_meta and p.dtype == torch.float32 for p in llada2.model.parameters())
    moe = llada2.model.model.layers[1].mlp
    assert isinstance(moe, SparseMoe) and float(moe.gate.expert_bias.abs().sum()) > 0


def naive_route(gate: Gate, h: torch.Tensor) -> list[dict[int, float]]:
    c = gate.c
    out = []
    for x in h:
        s = torch.sigmoid(gate.weight.float() @ x.float())
        choice = s + gate.expert_bias
        size = c.num_experts // c.n_group
        groups = sorted(range(c.n_group), key=lambda g: -float(choice[g * size:(g + 1) * size].topk(2).values.sum()))
        allowed = [e for g in groups[: c.topk_group] for e in range(g * size, (g + 1) * size)]
        top = sorted(allowed, key=lambda e: -float(choice[e]))[: c.num_experts_per_tok]
        tot = float(sum(s[e] for e in top))
        out.append({e: float(s[e]) / tot * c.routed_scaling_factor for e in top})
    return out


def test_moe_matches_a_per_token_reading(llada2: LoadedModel) -> None:
    moe = llada2.model.model.layers[2].mlp
    assert isinstance(moe, SparseMoe) and moe.shared_experts is not None
    h = torch.randn(7, llada2.config.dim, generator=torch.Generator().manual_seed(3))
    idx, w = moe.gate(h)
    for row, (ids, ws) in enumerate(zip(idx.tolist(), w.tolist(), strict=True)):
        want = naive_route(moe.gate, h[row:row + 1])[0]
        assert set(ids) == set(want)
        assert all(abs(want[e] - x) < 1e-5 for e, x in zip(ids, ws, strict=True))
    with torch.no_grad():
        got = moe(h[None])[0]
        ref = torch.stack([sum(wt * moe.experts[e](x) for e, wt in r.items()) + moe.shared_experts(x)
                           for x, r in zip(h, naive_route(moe.gate, h), strict=True)])
    assert torch.allclose(got, ref, atol=1e-5)


@pytest.mark.parametrize("prompt_len", [21, 24])  # a partial last prompt block, and none
def test_cached_decoding_equals_uncached_for_every_policy(llada2: LoadedModel, prompt_len: int) -> None:
    m, prompt = llada2.model, prompt_ids(prompt_len)
    # block by block; the multi-block passes of the *_multi presets: tests/engine/model/adapters/test_llada2_multi_block.py
    for name in (p for p in PRESETS if not p.endswith("_multi")):
        seq = make_sequence(m, prompt, make_policy(name), 20, block=BLOCK, max_len=MAX_LEN)
        ref = make_sequence(m, prompt, make_policy(name), 20, block=BLOCK, max_len=MAX_LEN)
        assert isinstance(seq, Sequence) and seq.align and seq.lead == prompt_len % BLOCK
        attrs = new_slot_attrs(MAX_LEN, 0)
        while not seq.done():
            feed, blk = seq.prepare(), seq._block()
            a = seq._feed_start()
            window = [*prompt, *seq.middle.tolist()][: a + BLOCK]
            want = uncached(m, window)[seq.P + blk.start: seq.P + blk.stop]
            (got,) = execute(m, [seq], [feed], [attrs])
            assert torch.allclose(got, want, atol=ATOL), (name, float((got - want).abs().max()))
            seq.update(got)
            ref.prepare()
            ref.update(want)
        assert seq.final_middle() == ref.final_middle() and seq.forwards == ref.forwards, name
        assert MASK not in seq.final_middle() and len(seq.final_middle()) <= 20


def test_generate_runs_every_preset_and_blocks_are_aligned(llada2: LoadedModel) -> None:
    m = llada2.model
    for name in PRESETS:
        seq = make_sequence(m, prompt_ids(13, seed=5), make_policy(name), 30, block=BLOCK, max_len=MAX_LEN)
        starts = []
        for _ in steps_alone(m, seq):
            if not seq.done():
                starts.append(seq._feed_start())
        assert all(s % BLOCK == 0 for s in starts)
        assert seq.done() and seq.reason in ("budget", "end_of_middle")


def test_prompt_cache_reuse_rounds_down_to_whole_blocks(llada2: LoadedModel) -> None:
    seq = make_sequence(llada2.model, prompt_ids(21), make_policy("threshold"), 8, reused=21,
                        block=BLOCK, max_len=MAX_LEN)
    assert seq.clean_len == 16  # the partial block [16, 21) is re-fed with the first middle block


def test_checkpoint_path_is_a_directory(llada2: LoadedModel) -> None:
    assert isinstance(llada2.path, Path) and (llada2.tokenizer_path / "tokenizer.json").exists()
