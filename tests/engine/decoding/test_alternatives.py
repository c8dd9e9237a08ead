"""Alternatives (engine.decoding.alternatives) on the step loop (engine.decoding.scheduler, here in process): forks
from the next most likely first tokens, decoded in the same forwards as their request, give what
each gives alone; the primary is untouched; the group's latency is bounded (forks_budget); the
text engine returns the forks' texts on done."""

from __future__ import annotations

import threading
from dataclasses import replace

import pytest
import torch

from engine.api import MAX_ALTERNATIVES, CompletionRequest, EngineEvent, Plan, decided
from engine.decoding import local
from engine.decoding.alternatives import (
    PRESET_ALTERNATIVES,
    alternatives_for,
    fork_tokens,
    forks_budget,
)
from engine.decoding.decode import Sequence
from engine.decoding.policies import Policy, make_policy
from engine.presets import DEFAULT_PRESET
from engine.service import TextEngine
from tests.engine.conftest import decode_alone

INF = float("inf")


def test_fork_tokens_take_the_next_ranks_and_skip_disallowed() -> None:
    logits = torch.tensor([0.1, 3.0, -INF, 2.0, 1.0])
    assert fork_tokens(logits, 3) == [3, 4]
    assert fork_tokens(logits, 5) == [3, 4, 0]  # -inf never counts
    assert fork_tokens(logits, 1) == []
    assert fork_tokens(torch.tensor([5.0, -INF, -INF]), 3) == []  # healing allowed one token


def test_alternatives_for_follows_the_preset_unless_the_plan_says() -> None:
    assert alternatives_for(Plan(), "speedy") == 1
    assert alternatives_for(Plan(), "quality") == PRESET_ALTERNATIVES["quality"] > 1
    assert alternatives_for(Plan(preset="speedy"), "quality") == 1
    assert alternatives_for(Plan(alternatives=2), "speedy") == 2
    assert alternatives_for(Plan(alternatives=99), "speedy") == MAX_ALTERNATIVES


def test_a_plan_is_decided_once_with_its_preset_and_its_candidates() -> None:
    assert decided(Plan(), "quality") == Plan(preset="quality", alternatives=PRESET_ALTERNATIVES["quality"])
    assert decided(Plan(preset="speedy", alternatives=99), "quality") == \
        Plan(preset="speedy", alternatives=MAX_ALTERNATIVES)
    once = decided(Plan(), DEFAULT_PRESET)
    assert once.preset == DEFAULT_PRESET and once.alternatives == 1
    assert decided(once, "quality") == once  # another default later changes nothing: it travels decided


@pytest.fixture(scope="module")
def embedded() -> TextEngine:  # the embedded model, trained and committed
    return TextEngine(threads=2)


PREFIX = "import os\n\n\ndef data_path(name):\n    base = os.path.dirname(__file__)\n    return "


def request(rid: str, alternatives: int, max_tokens: int = 24, preset: str | None = None) -> CompletionRequest:
    plan = Plan(max_tokens=max_tokens, stop="line", alternatives=alternatives, preset=preset)
    return CompletionRequest(rid, "d", PREFIX, "\n", plan)


class Forks:
    """Wraps `TextEngine.fork` (the step loop's way to start an alternative): records each fork
    and the number of events its request had emitted when it started; `build` makes it."""

    def __init__(self, engine: TextEngine, build=None) -> None:  # noqa: ANN001
        self.orig, self.build = engine.fork, build
        self.made: list[tuple[int, Sequence]] = []
        self.events: list[EngineEvent] = []
        self.events_at_fork: list[int] = []

    def __call__(self, req: CompletionRequest, tok: int, row: int, policy: Policy | None = None) -> Sequence:
        self.events_at_fork.append(len(self.events))
        seq = (self.build or self.orig)(req, tok, row, policy)
        self.made.append((tok, seq))
        return seq

    def run(self, engine: TextEngine, req: CompletionRequest, cancel: threading.Event | None = None
            ) -> EngineEvent:
        engine.prompt_cache.clear()
        for ev in engine.complete(req, cancel):
            self.events.append(ev)
        return self.events[-1]


class When(threading.Event):
    """A cancel flag that is set once `cond()` holds (the loop reads it before every forward)."""

    def __init__(self, cond) -> None:  # noqa: ANN001
        super().__init__()
        self.cond = cond

    def is_set(self) -> bool:
        return bool(self.cond())


def test_forks_batched_with_their_request_equal_each_decoded_alone(embedded: TextEngine,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    one = Forks(embedded).run(embedded, request("one", 1))
    forks = Forks(embedded)
    monkeypatch.setattr(embedded, "fork", forks)
    two = forks.run(embedded, request("two", 2))
    assert two.text == one.text  # the primary decodes exactly as without its fork
    ((tok, fork),) = forks.made
    assert fork.done() and fork.row == 1 and fork.final_middle()[0] == tok
    solo_req = request("solo", 1)
    solo = forks.orig(replace(solo_req, plan=decided(solo_req.plan, embedded.preset)), tok, 0, None)  # as the loop sends it
    decode_alone(embedded.model, solo)
    assert fork.final_middle() == solo.final_middle()
    st = two.stats or {}
    assert st["alternative_rows"] == 1 and st["alternative_row_forwards"] == fork.forwards > 0
    # the request's forwards: every forward that carried the primary or its fork, once
    assert fork.tally.forwards == st["forwards"] and fork.forwards < st["forwards"]
    assert st["forwards"] <= st["primary_forwards"] + forks_budget(solo)


def test_a_fork_that_would_outlast_its_request_is_dropped(embedded: TextEngine,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    def slow(req: CompletionRequest, tok: int, row: int, policy: Policy | None) -> Sequence:
        """One token a forward over a long budget, never ending early."""
        long = replace(req, plan=replace(req.plan, max_tokens=200, stop="none"))
        seq = forks.orig(long, tok, row, make_policy("one_per_step"))
        seq.sp = replace(seq.sp, end_of_middle=-1)
        return seq

    forks = Forks(embedded, slow)
    monkeypatch.setattr(embedded, "fork", forks)
    done = forks.run(embedded, request("slow", 2, max_tokens=6, preset="one_per_step"))
    assert done.kind == "done" and done.alternatives == ()
    ((_tok, fork),) = forks.made
    st = done.stats or {}
    assert not fork.done() and st["alternative_rows"] == 0
    paced = st["primary_forwards"] + max(embedded.config.block_size, st["primary_forwards"])
    assert fork.forwards <= paced and st["forwards"] <= paced
    assert not embedded.loop().running and len(embedded.loop().free_rows) == local.LOCAL_ROWS


def test_forks_start_after_the_first_complete_draft_and_cancel_stops_the_group(
        embedded: TextEngine, monkeypatch: pytest.MonkeyPatch) -> None:
    forks = Forks(embedded)
    monkeypatch.setattr(embedded, "fork", forks)
    cancel = When(lambda: bool(forks.made) and forks.made[0][1].forwards >= 2)
    done = forks.run(embedded, request("c", 2, max_tokens=24, preset="one_per_step"), cancel)
    # the fork started in the step that completed the first draft: it never slowed it
    (at,) = forks.events_at_fork
    assert forks.events[at].draft_complete and not any(e.draft_complete for e in forks.events[:at])
    assert done.kind == "done" and done.reason == "cancelled" and done.alternatives == ()
    fork = forks.made[0][1]
    assert fork.forwards == 2 and not fork.done()  # the group stopped with the fork unfinished
    assert not embedded.loop().running


def test_a_fork_that_fails_to_start_leaves_its_request_alone(embedded: TextEngine,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    alone = Forks(embedded).run(embedded, request("alone", 1))

    def broken(*_args: object) -> Sequence:
        raise RuntimeError("no room for an alternative")

    monkeypatch.setattr(embedded, "fork", Forks(embedded, broken))
    done = Forks(embedded).run(embedded, request("broken", 3))
    assert done.kind == "done" and done.alternatives == () and done.text == alone.text


def test_text_engine_returns_distinct_alternatives_and_keeps_the_primary(embedded: TextEngine) -> None:
    prefix = "import os\n\n\ndef data_path(name):\n    base = os.path.dirname(__file__)\n    return "
    results = {}
    for n in (1, 3):
        embedded.prompt_cache.clear()
        plan = Plan(max_tokens=24, stop="line", alternatives=n)
        results[n] = list(embedded.complete(CompletionRequest(f"r{n}", "d", prefix, "\n", plan)))[-1]
    one, three = results[1], results[3]
    assert one.alternatives == ()
    assert three.text == one.text  # the forks do not disturb the primary
    assert 1 <= len(three.alternatives) <= 2
    assert len(set(three.alternatives)) == len(three.alternatives) and one.text not in three.alternatives
    assert three.stats["alternative_rows"] == len(three.alternatives) or len(three.alternatives) < 2
    # the forks' forwards are the request's: more than the primary's own, fewer than decoded apart
    assert three.stats["forwards"] >= three.stats["primary_forwards"] == one.stats["forwards"]
    assert three.stats["tpf"] == three.stats["tokens"] / three.stats["forwards"]
