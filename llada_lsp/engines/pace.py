"""How fast the loaded model decodes, as the client measures it, and the deadlines that follow.

A model 100x slower than the embedded one is slow, not broken: its requests get deadlines
scaled by its measured seconds per step (`Pace.deadlines`), and the user is told
(`Pace.text`: `warming` while a request waits past the first-event floor on a model whose
step time is not known yet, `slow: 3.1 s/step` above `SLOW_S`, or why the last request was
stuck; "" for a fast model). The options' `engineFirstEventMs` / `engineTimeoutMs` are the
floors; `LIMIT_S` bounds every deadline, so a request that is truly stuck still ends (its
error names the deadline and the pace). Measured from the engine's own events, the same for
every client: a done event's `total_ms - queue_ms` over its `forwards`, and while nothing
is known, a draft's time since the job started over its `step`. Torch-free.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

LIMIT_S = 600.0  # no deadline is longer (the options' engineTimeoutMs maximum)
SLACK = 3.0  # a deadline allows this many times the expected time (load comes and goes)
FIRST_STEPS = 8  # steps before a first event: the prefill and the first commits
SLOW_S = 0.25  # seconds a step above which the status says "slow"
ALPHA = 0.3  # the weight of a new measurement in the moving average

PaceListener = Callable[[str], None]  # the status text changed


@dataclass
class Pace:
    s_per_step: float | None = None  # None: not measured yet (warming)
    stuck: str = ""  # the last request that passed a deadline, until one ends in time
    warming: bool = False  # a request waits past its first-event floor on an unmeasured model
    on_change: PaceListener | None = None

    @property
    def text(self) -> str:
        """The status: "" (fast), "warming", "slow: 3.1 s/step" or "stuck: <why>"."""
        if self.stuck:
            return f"stuck: {self.stuck}"
        if self.s_per_step is None:
            return "warming" if self.warming else ""
        return f"slow: {self.s_per_step:.1f} s/step" if self.s_per_step >= SLOW_S else ""

    def observe(self, seconds: float, steps: int) -> None:
        """`steps` forwards took `seconds`."""
        if steps <= 0 or seconds <= 0:
            return
        before = self.text
        s = seconds / steps
        self.s_per_step = s if self.s_per_step is None else (1 - ALPHA) * self.s_per_step + ALPHA * s
        self.stuck, self.warming = "", False
        self._changed(before)

    def late(self) -> None:
        """A request passed its first-event floor without an event: a cold model is warming."""
        before = self.text
        self.warming = True
        self._changed(before)

    def timed_out(self, why: str) -> None:
        before = self.text
        self.stuck = why
        self._changed(before)

    def deadlines(self, first_floor_s: float | None, total_floor_s: float | None,
                  expected_steps: int) -> tuple[float | None, float | None]:
        """(first event, end) of a request expecting `expected_steps` forwards: the floors, or
        SLACK x the measured time when that is longer, at most LIMIT_S; before any measurement
        (a cold or loading model) the limit itself, so that the first answer is waited for.
        None stays None (no deadline)."""
        if self.s_per_step is None:
            scaled_first = scaled_total = LIMIT_S
        else:
            scaled_first = SLACK * self.s_per_step * min(FIRST_STEPS, expected_steps)
            scaled_total = SLACK * self.s_per_step * expected_steps
        first = None if first_floor_s is None else min(LIMIT_S, max(first_floor_s, scaled_first))
        total = None if total_floor_s is None else min(LIMIT_S, max(total_floor_s, scaled_total))
        if first is not None and total is not None:
            first = min(first, total)
        return first, total

    def _changed(self, before: str) -> None:
        if self.text != before and self.on_change is not None:
            self.on_change(self.text)
