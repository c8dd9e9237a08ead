"""In/del decoding (LLaDA2.2's Levenshtein editing, engine.decoding.indel) against a reference
transcription of SGLang's JointThresholdInDel (indel_reference.py) on the tiny LLaDA2.2
fixture, its head biased so that the model emits DELETE and INSERT: token for token after
every forward, forward for forward, with the cached logits equal to the uncached window's at
every step (a structural edit keeps the KV cache exact), over prompts that delete, insert,
trip the loop guard and end in the forced cleanup."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from engine.decoding.batch import execute, new_slot_attrs
from engine.decoding.decode_bidir import make_sequence
from engine.decoding.indel import InDelSequence, restructure
from engine.decoding.policies import make_policy
from engine.model.loader import LoadedModel, load_model
from tests.engine.model.adapters.indel_reference import edit_block, indel_generate
from tests.engine.model.adapters.reference_models import block_causal, load_checkpoint
from tests.engine.model.adapters.tiny_ckpts import EOS, MASK, PAD, prompt_ids, write_llada2
from tests.engine.model.adapters.tiny_llada22 import (
    DELETE,
    ROUTING_BLOCK,
    SPLIT,
    edit_head_rows,
    write_llada22,
)

MAX_LEN, TOL, GEN, POST = 320, 1e-4, 40, 4
# DELETE outranks token 24 and INSERT token 85 wherever those lead: rows chosen on this
# fixture so the four behaviours below occur (the test asserts each one did)
BIAS = {DELETE: (24, 1.02), SPLIT: (85, 1.02 * 1.001)}


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = write_llada22(tmp_path_factory.mktemp("llada22_indel"))
    return edit_head_rows(out, BIAS, zero=(MASK, EOS, PAD))


@pytest.fixture(scope="module")
def lm(ckpt: Path) -> LoadedModel:
    m = load_model(ckpt, dtype=torch.float32)
    m.model.setup_cache(1, MAX_LEN)
    return m


def test_restructure_deletes_splits_pads_and_cuts() -> None:
    M, D, S = MASK, DELETE, SPLIT
    old = [M, 5, 6, M, 7]
    for new in ([3, D, 6, S, 7], [S, S, S, 4, 7], [D, D, 6, 1, 2]):
        orig = [True, False, False, True, False]
        assert restructure(new, old, orig, M, D, S) == edit_block(new, old, orig, 5, M, D, S)
    assert restructure([3, D, 6, S, 7], old, [True] * 5, M, D, S) == ([3, 6, M, M, 7], [True, True, False, True, True])
    assert restructure([S, 1, 2, 3, 4], [9, 1, 2, 3, 4], [False] * 5, M, D, S)[0] == [M, 9, 1, 2, 3]


def run_engine(lm: LoadedModel, prompt: list[int], post: int = POST) -> tuple[InDelSequence, list[list[int]]]:
    m = lm.model
    seq = make_sequence(m, prompt, make_policy("indel", max_post_edit_steps=post), GEN, max_len=MAX_LEN)
    assert isinstance(seq, InDelSequence)
    attrs, states = new_slot_attrs(MAX_LEN, 0), []
    while not seq.done():
        feed, blk = seq.prepare(), seq._block()
        window = [*prompt, *seq.middle.tolist()][: seq._feed_start() + ROUTING_BLOCK]
        n = len(window)
        with torch.no_grad():
            want = m(torch.tensor([window]), torch.arange(n)[None], block_causal(n, ROUTING_BLOCK)[None, None])[0]
        (got,) = execute(m, [seq], [feed], [attrs])
        assert float((got - want[seq.P + blk.start: seq.P + blk.stop]).abs().max()) <= TOL
        seq.update(got)
        states.append(seq.middle[blk].tolist())
    return seq, states


@pytest.mark.parametrize(("prompt_len", "post"), [(21, POST), (28, POST), (40, 16)])  # 16: SGLang's default
def test_engine_matches_the_reference_token_for_token(lm: LoadedModel, ckpt: Path, prompt_len: int,
                                                      post: int) -> None:
    prompt = prompt_ids(prompt_len, seed=10 + (prompt_len - 21) // 7)
    cfg, state = load_checkpoint(ckpt)
    canvas, forwards, trace = indel_generate(cfg, state, prompt, GEN, ROUTING_BLOCK, MASK, DELETE, SPLIT,
                                             max_post=post)
    seq, states = run_engine(lm, prompt, post)
    lead = prompt_len % ROUTING_BLOCK
    want = [s[lead:] if k == 0 else s for k, steps in enumerate(trace.blocks) for s in steps]
    assert states == want
    assert seq.forwards == forwards == len(want)
    c = seq.counts
    assert (c.deletes, c.inserts, c.loop_guards, c.forced) == (trace.deletes, trace.inserts, trace.loop_guards,
                                                               trace.forced)
    assert c.deletes > 0 and c.inserts > 0 and c.forced > 0
    final = seq.final_middle()
    assert not {MASK, DELETE, SPLIT} & set(final)
    assert final == [t for t in canvas[:GEN] if t not in (MASK, DELETE, SPLIT)]


def test_the_loop_guard_fires_as_in_the_reference(lm: LoadedModel) -> None:
    seq, _ = run_engine(lm, prompt_ids(21, seed=10))
    assert seq.counts.loop_guards > 0


def test_indel_is_refused_without_edit_tokens(tmp_path: Path) -> None:
    lm21 = load_model(write_llada2(tmp_path / "llada21"), dtype=torch.float32)
    with pytest.raises(ValueError, match="delete_token_id and split_token_id"):
        make_sequence(lm21.model, prompt_ids(9), make_policy("indel"), 16, max_len=128)


def test_a_model_with_edit_tokens_decodes_presets_with_the_indel_rule(lm: LoadedModel, tmp_path: Path) -> None:
    from engine.decoding.indel import policy_for
    from engine.decoding.policies import DraftEdit, InDel

    speedy, quality = policy_for(lm.model, "speedy"), policy_for(lm.model, "quality")
    assert isinstance(speedy, InDel) and isinstance(quality, InDel)
    assert (speedy.config.threshold, quality.config.threshold) == (0.5, 0.9)
    lm21 = load_model(write_llada2(tmp_path / "llada21"), dtype=torch.float32)
    assert isinstance(policy_for(lm21.model, "speedy"), DraftEdit)  # LLaDA2.1: as before
