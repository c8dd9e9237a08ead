"""Stable context windows: bounded, and their start stays put while text is appended."""

from __future__ import annotations

import random

from engine.prompt.window import char_window, token_window


def test_char_window_is_bounded_starts_at_a_line_and_moves_in_quanta() -> None:
    rng = random.Random(3)
    lines = ["".join(rng.choice("abc xyz_()") for _ in range(rng.randrange(0, 70))) for _ in range(400)]
    text = "\n".join(lines)
    starts = []
    for n in range(3000, len(text), 7):  # the user types: the text before the cursor grows
        cut = char_window(text[:n], 2000, quantum=256)
        start = n - len(cut)
        assert text[:n].endswith(cut) and 0 < len(cut) <= 2000
        assert text[start - 1] == "\n"  # a line start within the first quantum (lines < 256 chars)
        starts.append(start)
    moves = sum(a != b for a, b in zip(starts, starts[1:], strict=False))
    assert 0 < moves <= (len(text) - 3000) // 256 + 1
    assert starts == sorted(starts)


def test_char_window_leaves_short_text_and_cuts_a_line_free_text_at_the_quantum() -> None:
    assert char_window("abc\ndef", 100) == "abc\ndef"
    assert char_window("abc", 0) == ""
    cut = char_window("x" * 1000, 300, quantum=128)
    assert len(cut) == 1000 - 768  # start rounded up to a multiple of the quantum


def test_token_window_fits_the_budget_and_keeps_its_start_while_growing() -> None:
    ids = list(range(1000))
    assert token_window(ids[:50], 100) == ids[:50]
    assert token_window(ids, 0) == [] and token_window(ids, -3) == []
    firsts = []
    for n in range(101, 1000):
        w = token_window(ids[:n], 100)
        assert 75 < len(w) <= 100 and w == ids[n - len(w):n]
        firsts.append(w[0])
    changes = sum(a != b for a, b in zip(firsts, firsts[1:], strict=False))
    assert changes == (999 - 100) // 25  # one move per quantum (a quarter of the budget)


def test_token_window_with_a_quantum_larger_than_the_budget_still_fits() -> None:
    w = token_window(list(range(10)), 3, quantum=8)
    assert w == [9]  # the quantum is capped at the budget: whole quanta of 3 are dropped
