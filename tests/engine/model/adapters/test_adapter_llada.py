"""LLaDA-8B adapter: real config keys and weight names load offline; the bidirectional
decoder with its approximate cache against uncached full forwards; infill with a suffix."""

from __future__ import annotations

import pytest
import torch

from engine.decoding.decode_bidir import BidirSequence
from engine.decoding.policies import make_policy
from engine.model.loader import LoadedModel
from tests.engine.conftest import decode_alone
from tests.engine.model.adapters import bidir_checks as bc
from tests.engine.model.adapters.tiny_ckpts import EOS, MASK, prompt_ids, write_llada


@pytest.fixture(scope="module")
def llada(tmp_path_factory: pytest.TempPathFactory) -> LoadedModel:
    return bc.cached_model(tmp_path_factory, write_llada)


def test_loads_bidirectional_unshifted(llada: LoadedModel) -> None:
    c = llada.config
    assert llada.family == "llada" and llada.cache == "approximate"
    assert c.attention == "bidirectional" and not c.shift_logits
    assert c.special.mask == MASK and c.special.end_of_text == EOS


def test_attention_is_bidirectional(llada: LoadedModel) -> None:
    a, b = prompt_ids(12), prompt_ids(12)
    b[-1] = (b[-1] + 1) % 80  # a later token changes the logits of the first position
    assert not torch.allclose(bc.full_logits(llada.model, a)[0], bc.full_logits(llada.model, b)[0])


def test_step_refresh_equals_uncached(llada: LoadedModel) -> None:
    bc.check_step_refresh_is_uncached(llada, prompt_ids(11), prompt_ids(6, seed=1))


def test_block_refresh_is_close_to_uncached(llada: LoadedModel) -> None:
    _, partial = bc.check_block_refresh_is_close(llada, prompt_ids(11), prompt_ids(6, seed=1))
    assert partial > 0  # the cache was used


def test_trailing_end_of_text_is_trimmed(llada: LoadedModel) -> None:
    sp = llada.config.special
    seq = BidirSequence(prompt_ids(5), [7, 8], sp, make_policy("threshold"), 8, 8, False)
    seq.middle[:] = torch.tensor([20, 21, 22, EOS, 30, EOS, EOS, EOS])
    seq.committed[:] = True
    seq._find_end()
    assert seq.final_middle() == [20, 21, 22]
    seq.middle[3] = 23  # no end-of-middle before the run: the trailing run is still trimmed
    seq._find_end()
    seq.end = None
    assert seq.final_middle() == [20, 21, 22, 23, 30]


def test_decoding_yields_done(llada: LoadedModel) -> None:
    from engine.decoding.decode_bidir import make_sequence

    seq = make_sequence(llada.model, prompt_ids(9), make_policy("speedy"), 16, suffix=[5, 6, 7], max_len=256)
    evs = decode_alone(llada.model, seq)
    assert evs[-1].kind == "done" and evs[-1].middle == seq.final_middle()


def test_cached_step_is_exact_when_nothing_changed(llada: LoadedModel) -> None:
    bc.check_cached_step_exact_on_unchanged_canvas(llada, prompt_ids(11), prompt_ids(6, seed=1))


def test_multi_block_edit_passes_are_full_forwards(llada: LoadedModel) -> None:
    from engine.decoding.decode_bidir import make_sequence

    pol = make_policy("draft_edit", multi_block=True, edit_threshold=0.0)
    seq = make_sequence(llada.model, prompt_ids(9), pol, 24, suffix=[5, 6], block=8, max_len=256)
    decode_alone(llada.model, seq)
    assert seq.done() and seq.refreshes >= seq.multi_pass
