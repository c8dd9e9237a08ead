"""The model's pace and the deadlines that follow it (llada_lsp.engines.pace, issue 50 §2)."""

from __future__ import annotations

import pytest

from llada_lsp.engines.pace import FIRST_STEPS, LIMIT_S, SLACK, Pace


def test_a_cold_model_is_waited_for_until_its_limit() -> None:
    p = Pace()
    assert p.text == ""  # nothing is said until a request is late
    assert p.deadlines(10.0, 30.0, 34) == (LIMIT_S, LIMIT_S)
    assert p.deadlines(None, None, 34) == (None, None)  # no deadline stays none
    p.late()
    assert p.text == "warming"


def test_deadlines_follow_the_measured_step_time_above_the_floors() -> None:
    told: list[str] = []
    p = Pace(on_change=told.append)
    p.observe(0.5, 50)  # 10 ms a step: the floors rule
    assert p.text == "" and p.deadlines(10.0, 30.0, 34) == (10.0, 30.0)
    p = Pace(on_change=told.append)
    p.observe(31.0, 10)  # 3.1 s a step
    assert p.text == "slow: 3.1 s/step" and told[-1] == "slow: 3.1 s/step"
    first, total = p.deadlines(10.0, 30.0, 34)
    assert first == pytest.approx(SLACK * 3.1 * FIRST_STEPS) and total == pytest.approx(SLACK * 3.1 * 34)
    assert p.deadlines(10.0, 30.0, 100)[1] == LIMIT_S  # 3 x 3.1 x 100 s is past the limit
    first, total = p.deadlines(10.0, 30.0, 6)
    assert first == total == pytest.approx(SLACK * 3.1 * 6)  # the first event never waits longer than the end


def test_a_stuck_request_is_said_until_one_ends_in_time() -> None:
    told: list[str] = []
    p = Pace(on_change=told.append)
    p.observe(0.4, 4)  # 0.1 s a step: fast, nothing to say
    p.timed_out("a request got no answer in 9 s")
    assert p.text == "stuck: a request got no answer in 9 s"
    p.observe(0.4, 4)
    assert p.text == "" and told == ["stuck: a request got no answer in 9 s", ""]
