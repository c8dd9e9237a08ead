"""The paired statistics of the A/B harness, bench/ab.py (pure functions)."""

from __future__ import annotations

import math

import pytest

from bench.ab import Outcome, Scored, paired, ratio_interval, sign_test


def test_sign_test_is_the_two_sided_binomial() -> None:
    assert sign_test(0, 0) == 1.0
    assert sign_test(5, 1) == pytest.approx(2 * (1 + 6) / 64)
    assert sign_test(16, 4) == sign_test(4, 16) == pytest.approx(2 * sum(math.comb(20, i) for i in range(5)) / 2**20)
    assert sign_test(16, 4) < 0.05 < sign_test(7, 3)
    assert sign_test(3, 3) == 1.0  # capped


def _o(text: str, em: bool, es: float) -> Outcome:
    return Outcome(text, len(text), 1, em, es, True)


def test_paired_counts_wins_and_losses_per_task() -> None:
    base = Scored("a", [_o("x", False, 0.2), _o("y", True, 1.0), _o("z", False, 0.5)])
    other = Scored("b", [_o("x2", True, 1.0), _o("y2", False, 0.4), _o("z", False, 0.5)])
    got = paired(base, other)
    assert got["differ"] == 2 and (got["em_wins"], got["em_losses"]) == (1, 1)
    assert (got["es_wins"], got["es_losses"]) == (1, 1) and got["es_sign_p"] == 1.0
    with pytest.raises(ValueError):
        paired(base, Scored("c", other.outcomes[:2]))  # the same tasks or nothing


def test_ratio_interval_brackets_the_ratio_of_medians() -> None:
    base = [10.0, 20.0, 30.0, 40.0, 50.0]
    lo, hi = ratio_interval(base, [2 * x for x in base])
    assert lo == hi == 2.0  # every resample doubles: paired by task
    lo, hi = ratio_interval(base, [12.0, 18.0, 33.0, 41.0, 49.0])
    assert lo < 1.0 < hi  # no clear change: the interval holds 1
    assert ratio_interval([], []) == (0.0, 0.0)
