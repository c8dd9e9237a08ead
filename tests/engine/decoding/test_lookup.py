"""Context agreement (engine.decoding.lookup): the context's guess, the run it adds to a
step's commits, and a decode that takes fewer forwards for the same tokens."""

from __future__ import annotations

import dataclasses

import torch

from engine.decoding.decode import Sequence
from engine.decoding.lookup import ContextLookup, agreeing_run
from engine.decoding.policies import make_policy
from engine.model.native import SpecialTokens

SP = SpecialTokens(mask=1, end_of_text=2, end_of_middle=3, pad=0, fim_prefix=4, fim_suffix=5, fim_middle=6)
SPECIAL = set(dataclasses.astuple(SP))
V = 40


def test_the_guess_follows_the_most_recent_earlier_occurrence() -> None:
    look = ContextLookup([5, 20, 21, 22, 4, 20, 23, 24, 6], SPECIAL)
    assert look.guess([20], 3) == [23, 24]  # the prompt's latest 20, cut at the trailing FIM marker's place
    assert look.guess([21], 5) == [22]  # cut at the special token after it
    assert look.guess([30, 31, 30], 4) == [31, 30]  # the middle's own earlier 30 comes first
    assert look.guess([30], 4) == []  # never seen before
    assert look.guess([], 2) == []  # the prompt's last text token (24) occurs once
    assert ContextLookup([20, 21, 20, 6], SPECIAL).guess([], 2) == [21, 20]  # goes on from the text before the marker
    assert look.guess([3], 2) == []  # a special token has no continuation


def test_the_run_commits_masked_positions_while_the_model_and_the_guess_agree() -> None:
    look = ContextLookup([20, 21, 22, 23, 24, 6], SPECIAL)
    n = 4
    masked = torch.tensor([False, True, True, True])
    live = torch.ones(n, dtype=torch.bool)
    commit = torch.tensor([False, True, False, False])  # this step commits position 1 (top 21)
    ids: list[int | None] = [20, 21, None, None]
    top = torch.tensor([20, 21, 22, 23])
    assert agreeing_run(commit, masked, live, top, ids, look, 8).tolist() == [False, True, True, True]
    top = torch.tensor([20, 21, 22, 30])  # the model disagrees at position 3: the run stops there
    assert agreeing_run(commit, masked, live, top, ids, look, 8).tolist() == [False, True, True, False]
    assert agreeing_run(commit, masked, live, top, ids, look, 0).tolist() == commit.tolist()  # limit 0
    dead = torch.tensor([True, True, False, False])  # after the completion's end
    assert agreeing_run(commit, masked, dead, torch.tensor([20, 21, 22, 23]), ids, look, 8).tolist() == commit.tolist()
    # a mask left before this step's commit: the guess has no committed prefix to go on from there
    gap: list[int | None] = [20, None, 22, None]
    assert agreeing_run(torch.tensor([False, False, True, False]), torch.tensor([False, True, True, True]), live,
                        torch.tensor([20, 30, 22, 23]), gap, look, 8).tolist() == [False, False, True, False]


def test_the_run_goes_through_a_token_this_step_committed_when_it_agrees() -> None:
    look = ContextLookup([20, 21, 22, 23, 6], SPECIAL)
    commit = torch.tensor([True, False, True, False])
    masked = torch.ones(4, dtype=torch.bool)
    live = torch.ones(4, dtype=torch.bool)
    top = torch.tensor([21, 22, 23, 9])
    # the block is the middle's second: the first ended in 20
    ids: list[int | None] = [7, 7, 7, 20, 21, None, 23, None]
    assert agreeing_run(commit, masked, live, top, ids, look, 8).tolist() == [True, True, True, False]
    ids[6] = 30  # committed this step, but not what the context says: the run ends before it
    assert agreeing_run(commit, masked, live, torch.tensor([21, 22, 30, 9]), ids, look, 8).tolist() == \
        [True, True, True, False]


def _decode(script: list[int], agreement: int) -> tuple[list[int], int]:
    """The middle and the forwards of a decode whose model prefers `script[i]` at position i
    with p ~0.4 (under Speedy's 0.5 threshold: the leftmost commits, one token a step)."""
    policy = make_policy("speedy", context_agreement=agreement, edit_passes=0, loop_repeats=0)
    seq = Sequence([5, 20, 21, 22, 23, 4, 7, 6], SP, policy, block=4, max_new_tokens=8, shift=False)
    while not seq.done():
        start = seq.block_start
        logits = torch.zeros(4, V)
        for i in range(4):
            logits[i, script[start + i]] = 2.4  # softmax over 40: ~0.4
        seq.update(logits)
    return seq.final_middle(), seq.forwards


def test_a_decode_with_agreement_commits_the_same_tokens_in_fewer_forwards() -> None:
    script = [20, 21, 22, 23, 9, 10, 11, 12]
    plain, n_plain = _decode(script, 0)
    agreed, n_agreed = _decode(script, 8)
    assert plain == agreed == script
    assert n_plain == 8 and n_agreed == 5  # 20 (then 21, 22, 23 agree with the prompt), 9, 10, 11, 12


def test_no_agreement_no_change() -> None:
    script = [20, 30, 31, 32, 9, 10, 11, 12]  # the model's 30 after 20 is not what the prompt says
    assert _decode(script, 8) == _decode(script, 0) == (script, 8)
    script = [20, 30, 22, 23, 9, 10, 11, 12]  # 23 after 22 is: it commits with 22
    assert _decode(script, 8) == (script, 7)


def test_speedy_on_the_native_model_decodes_with_agreement_and_a_published_checkpoint_without() -> None:
    from engine.decoding.indel import policy_for
    from engine.model.native import Transformer, preset

    native = Transformer(preset("test-tiny"))
    assert policy_for(native, "speedy").config.context_agreement == 8  # type: ignore[attr-defined]
    assert policy_for(native, "quality").config.context_agreement == 0  # type: ignore[attr-defined]

    class Adapter(torch.nn.Module):  # any other model class: a published checkpoint's adapter
        edit_tokens = None

    assert policy_for(Adapter(), "speedy").config.context_agreement == 0  # type: ignore[attr-defined]
