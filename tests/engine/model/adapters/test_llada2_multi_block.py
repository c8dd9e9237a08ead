"""Multi-block edit passes on LLaDA2's aligned block-causal layout (issue 30): the pass's noisy
copy of each block gives the logits LLaDA2's own uncached recipe gives that block over the
final tokens of the blocks before it (the prompt's partial last block included), and the
pass's clean rewrite leaves the cache as a fresh prefill of the final canvas would."""

from __future__ import annotations

import pytest
import torch

from engine.decoding.batch import execute, new_slot_attrs
from engine.decoding.decode import Sequence, Staged
from engine.decoding.decode_bidir import make_sequence
from engine.decoding.policies import make_policy
from engine.model.loader import LoadedModel, load_model
from tests.engine.model.adapters.tiny_ckpts import prompt_ids, write_llada2

BLOCK, MAX_LEN = 8, 256
ATOL = 1e-5


@pytest.fixture(scope="module")
def llada2(tmp_path_factory: pytest.TempPathFactory) -> LoadedModel:
    lm = load_model(write_llada2(tmp_path_factory.mktemp("llada2")), dtype=torch.float32)
    lm.model.setup_cache(1, MAX_LEN)
    return lm


def uncached(model: torch.nn.Module, window: list[int]) -> torch.Tensor:
    """LLaDA2's generate(): blocks of BLOCK from position 0, lower-triangular over blocks."""
    n = len(window)
    bid = torch.arange(n) // BLOCK
    with torch.no_grad():
        return model(torch.tensor([window]), torch.arange(n)[None], (bid[None, :] <= bid[:, None])[None, None])[0]


def reference(model: torch.nn.Module, seq: Sequence) -> torch.Tensor:
    """Each rewritten middle position's logits: its block over the blocks before, uncached."""
    canvas = [*seq.prompt, *seq.middle.tolist()]
    a0, nb = seq._multi_blocks()
    rows = []
    for k in range(nb):
        end = a0 + (k + 1) * BLOCK
        out = uncached(model, canvas[:end])
        rows.append(out[max(seq.P, end - BLOCK): end])
    return torch.cat(rows)


def decoder(model: torch.nn.Module, prompt: list[int]) -> Sequence:
    """Speedy with multi-block passes over a 20-token budget; the random model's favourite
    end-of-middle is banned so that the completion spans several blocks."""
    policy = make_policy("speedy", multi_block=True, mask_threshold=0.3)
    seq = make_sequence(model, prompt, policy, 20, block=BLOCK, max_len=MAX_LEN)
    stage, eom = seq._stage, seq.sp.end_of_middle

    def no_end(logits: torch.Tensor, where: slice, edit_only: bool, multi: bool) -> Staged:
        logits = logits.clone()
        logits[:, eom] = float("-inf")
        return stage(logits, where, edit_only, multi)

    seq._stage = no_end  # type: ignore[method-assign]
    return seq


@pytest.mark.parametrize("prompt_len", [21, 24])  # a partial last prompt block, and none
def test_multi_block_pass_equals_the_uncached_recipe(llada2: LoadedModel, prompt_len: int) -> None:
    m = llada2.model
    seq = decoder(m, prompt_ids(prompt_len))
    assert isinstance(seq, Sequence) and seq.align and seq.lead == prompt_len % BLOCK
    attrs = new_slot_attrs(MAX_LEN, 0)
    passes = 0
    while not seq.done():
        feed = seq.prepare()
        (got,) = execute(m, [seq], [feed], [attrs])
        if seq.phase == "multi":
            passes += 1
            want = reference(m, seq)
            assert got.shape == want.shape and got.shape[0] >= 2 * BLOCK - seq.lead  # over several blocks
            assert torch.allclose(got, want, atol=ATOL), float((got - want).abs().max())
        seq.update(got)
    assert passes >= 1  # the pass ran: not skipped for the aligned layout
    assert seq.done() and seq.multi_pass == passes


def test_multi_block_pass_rewrites_the_earlier_blocks_cache(llada2: LoadedModel) -> None:
    """After a pass, the cache rows of the prompt's tail block and of every middle block hold
    the keys of the final tokens: equal to a fresh prefill of prompt + final middle."""
    m = llada2.model
    prompt = prompt_ids(21)
    seq = decoder(m, prompt)
    attrs = new_slot_attrs(MAX_LEN, 0)
    while not seq.done():
        (got,) = execute(m, [seq], [seq.prepare()], [attrs])
        seq.update(got)
    assert seq.multi_pass >= 1
    a0, nb = seq._multi_blocks()
    end = a0 + nb * BLOCK
    cached = [c.k[0, a0:end].clone() for c in m.kv_caches()]
    fresh = make_sequence(m, [*prompt, *seq.middle.tolist()[: end - seq.P]], make_policy("speedy"), 1,
                          block=BLOCK, max_len=MAX_LEN)
    feed = fresh.prepare()  # the whole canvas as clean blocks, then a block of masks
    execute(m, [fresh], [feed], [new_slot_attrs(MAX_LEN, 0)])
    for c, k in zip(m.kv_caches(), cached, strict=True):
        assert torch.allclose(c.k[0, a0:end], k, atol=ATOL)
