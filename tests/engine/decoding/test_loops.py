"""The degenerate-loop guard: which tokens it forbids, and a decode that would loop without it."""

from __future__ import annotations

import pytest
import torch

from engine.decoding.decode import Sequence
from engine.decoding.loops import loop_bans, loop_token
from engine.decoding.policies import make_policy
from engine.model.native import SpecialTokens

SP = SpecialTokens(mask=1, end_of_text=2, end_of_middle=3, pad=0, fim_prefix=4, fim_suffix=5, fim_middle=6)
A, B, V = 10, 11, 16


def test_a_unit_of_two_repeated_four_times_is_forbidden_at_its_last_token() -> None:
    toks = [5, 6, 5, 6, 5, 6, 5, SP.mask]
    known = [True] * 7 + [False]
    assert loop_token(toks, known, 7, repeats=4, max_unit=8) == [6]
    assert loop_bans(toks, known, 4, 8, repeats=4) == [(7, 6)]


def test_fewer_copies_a_broken_period_or_an_unknown_window_forbid_nothing() -> None:
    assert loop_token([A, A, A, 0], [True] * 3 + [False], 3, repeats=5, max_unit=4) == []
    assert loop_token([5, 6, 5, 7, 5, 6, 5, 0], [True] * 7 + [False], 7, repeats=4, max_unit=8) == []
    toks = [5, 6, 5, 6, 5, 6, 5, 0]
    assert loop_token(toks, [True, True, True, False, True, True, True, False], 7, repeats=4, max_unit=8) == []


def test_a_single_token_run_is_a_unit_of_one() -> None:
    assert loop_token([A, A, A, 0], [True] * 3 + [False], 3, repeats=4, max_unit=8) == [A]
    assert loop_token([A, A, A, 0], [True] * 3 + [False], 3, repeats=4, max_unit=0) == []
    with pytest.raises(ValueError):
        loop_bans([A], [True], 0, 1, repeats=1)


def _decode(loop_repeats: int) -> list[int]:
    """Every position prefers A (p ~0.6, below the quality thresholds, so the leftmost commits
    one token a step) over B: without the guard the middle is all A."""
    policy = make_policy("quality", loop_repeats=loop_repeats, edit_passes=0)
    seq = Sequence([7, 8, 9], SP, policy, block=4, max_new_tokens=8, shift=False)
    logits = torch.full((4, V), -10.0)
    logits[:, A], logits[:, B] = 2.0, 1.5
    while not seq.done():
        seq.update(logits.clone())
    return seq.final_middle()


def test_the_guard_breaks_a_loop_the_model_prefers() -> None:
    assert _decode(0) == [A] * 8
    out = _decode(4)
    assert out == [A, A, A, B, A, A, A, B]
    assert all(out[i : i + 4] != [A] * 4 for i in range(len(out) - 3))


def _brute(tokens: list[int], known: list[bool], start: int, stop: int, repeats: int, max_unit: int
           ) -> list[tuple[int, int]]:
    """The definition: t is forbidden at i when window + [t] is `repeats` copies of its first u tokens."""
    out = []
    for i in range(start, min(stop, len(tokens))):
        seen: list[int] = []
        for u in range(1, max_unit + 1):
            lo = i - repeats * u + 1
            if lo < 0 or not all(known[lo:i]):
                continue
            full = [*tokens[lo:i], tokens[i - u]]
            if full == full[:u] * repeats and tokens[i - u] not in seen:
                seen.append(tokens[i - u])
        out += [(i, t) for t in seen]
    return out


def test_the_fast_scan_agrees_with_the_definition_on_random_canvases() -> None:
    import random

    rng = random.Random(0)
    for _ in range(3000):
        n = rng.randint(1, 40)
        tokens = [rng.choice([1, 2, 3]) for _ in range(n)]
        known = [rng.random() < 0.85 for _ in range(n)]
        start = rng.randint(0, n - 1)
        stop, repeats, max_unit = rng.randint(start, n), rng.randint(2, 5), rng.randint(0, 8)
        got = loop_bans(tokens, known, start, stop, repeats, max_unit)
        assert sorted(got) == sorted(_brute(tokens, known, start, stop, repeats, max_unit))
