"""A cancel that arrives while a forward runs stops it between layers when every request it
carries is cancelled (engine.decoding.interrupt), on the embedded tiny-code model: the layers
after the cancel never run, no event comes from the stopped step, the next step ends the
request as cancelled, and what the next request decodes on the same row and document is what
it decodes after a cancel applied between steps."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from engine.api import CompletionRequest, EngineEvent, Plan
from engine.decoding.rejections import Rejection
from engine.decoding.scheduler import Scheduler
from engine.service import TextEngine

PREFIX = "def mean(xs):\n    total = 0\n    for x in xs:\n        total += x\n    return "
SUFFIX = "\n\nprint(mean([1, 2, 3]))\n"
AFTER = 2  # the cancel arrives once this layer ran


@pytest.fixture(scope="module")
def engine() -> TextEngine:
    return TextEngine(threads=1)


def req(rid: str, prefix: str = PREFIX) -> CompletionRequest:
    return CompletionRequest(rid, "doc", prefix, SUFFIX, Plan(max_tokens=24, preset="one_per_step"))


class Layers:
    """Counts each layer's finished calls; `when` runs after layer AFTER (the cancel from the
    language server's thread, mid-forward)."""

    def __init__(self, engine: TextEngine) -> None:
        self.ran = [0] * len(engine.model.layers)
        self.when: Callable[[], None] | None = None
        self.handles = [layer.register_forward_hook(self._hook(i)) for i, layer in enumerate(engine.model.layers)]

    def _hook(self, i: int) -> Callable[..., None]:
        def hook(*_: Any) -> None:  # noqa: ANN401
            self.ran[i] += 1
            if i == AFTER and self.when is not None:
                fire, self.when = self.when, None
                fire()
        return hook

    def reset(self) -> None:
        self.ran = [0] * len(self.ran)

    def remove(self) -> None:
        for h in self.handles:
            h.remove()


def events() -> tuple[list[EngineEvent], Callable[[EngineEvent, Rejection | None], None]]:
    out: list[EngineEvent] = []
    return out, lambda ev, _why: out.append(ev)


def test_a_cancel_mid_forward_stops_it_between_layers(engine: TextEngine) -> None:
    s, layers = Scheduler(engine, max_batch=4), Layers(engine)
    try:
        evs, emit = events()
        s.submit(req("a"), "o", emit)
        s.step()
        s.step()
        assert [e.kind for e in evs] == ["draft", "draft"]
        layers.reset()
        layers.when = lambda: s.cancel("a", "o")
        s.step()
        n = len(layers.ran)
        assert layers.ran == [1] * (AFTER + 1) + [0] * (n - AFTER - 1)  # the rest never ran
        assert len(evs) == 2 and s.counters["interrupted"] == 1 and s.interrupter.stopped == 1
        s.step()  # the cancel applied: done, with the two forwards it took
        assert evs[-1].kind == "done" and evs[-1].reason == "cancelled" and evs[-1].step == 2
        assert not s.running and not s.interrupter.cancelled(("o", "a"))
    finally:
        layers.remove()



def test_a_first_forward_runs_whole_and_stores_its_prompt(engine: TextEngine) -> None:
    """The forward whose update stores the prompt is never stopped: the next keystroke's request
    reuses the prompt (else, with every request superseded during its prefill, none would)."""
    engine.prompt_cache.clear()
    s, layers = Scheduler(engine, max_batch=4), Layers(engine)
    try:
        evs, emit = events()
        s.submit(req("a"), "o", emit)
        layers.when = lambda: s.cancel("a", "o")
        s.step()
        assert layers.ran == [1] * len(layers.ran) and s.counters["interrupted"] == 0 and not evs
        s.step()
        assert evs[-1].reason == "cancelled"
        later, emit_b = events()
        s.submit(req("b", PREFIX + "total"), "o", emit_b)
        s.step()
        assert s.running[("o", "b")].stream.reused > 0  # type: ignore[union-attr]
    finally:
        layers.remove()


def test_a_first_forward_past_a_cached_prompt_is_stopped(engine: TextEngine) -> None:
    """A rescue's or the next keystroke's first forward feeds a few tokens past its cached
    prompt: it is stopped like any other."""
    engine.prompt_cache.clear()
    s, layers = Scheduler(engine, max_batch=4), Layers(engine)
    try:
        _, emit = events()
        s.submit(req("a"), "o", emit)
        s.step()
        s.cancel("a", "o")
        s.step()
        evs, emit_b = events()
        s.submit(req("b", PREFIX + "total"), "o", emit_b)
        layers.reset()
        layers.when = lambda: s.cancel("b", "o")
        s.step()
        assert layers.ran[-1] == 0 and s.counters["interrupted"] == 1 and not evs
    finally:
        layers.remove()

def test_a_forward_carrying_another_request_runs_whole(engine: TextEngine) -> None:
    s, layers = Scheduler(engine, max_batch=4), Layers(engine)
    try:
        evs, emit = events()
        other, emit_other = events()
        s.submit(req("a"), "o", emit)
        s.submit(CompletionRequest("b", "doc2", PREFIX, SUFFIX, Plan(max_tokens=24, preset="one_per_step")),
                 "o", emit_other)
        s.step()
        s.step()
        layers.reset()
        layers.when = lambda: s.cancel("a", "o")
        s.step()
        assert layers.ran == [1] * len(layers.ran) and s.counters["interrupted"] == 0
        assert len(other) == 3 and len(evs) == 2  # b went on; a's update was skipped (its cancel waits)
        s.step()
        assert evs[-1].reason == "cancelled" and len(other) == 4
    finally:
        layers.remove()


def next_request_after(engine: TextEngine, mid_forward: bool) -> tuple[list[str], int]:
    """Request a runs 2 steps on row 0, is cancelled (mid-forward or between steps), then b (its
    prefix typed on) decodes on the same row from the prompt cache: b's texts and the forwards
    stopped."""
    engine.prompt_cache.clear()
    s, layers = Scheduler(engine, max_batch=1), Layers(engine)
    try:
        _, emit = events()
        s.submit(req("a"), "o", emit)
        s.step()
        s.step()
        if mid_forward:
            layers.when = lambda: s.cancel("a", "o")
        else:
            s.cancel("a", "o")
        s.step()
        evs, emit_b = events()
        s.submit(req("b", PREFIX + "total"), "o", emit_b)
        while not evs or evs[-1].kind not in ("done", "error"):
            s.step()
        assert evs[-1].kind == "done" and evs[-1].reason != "cancelled"
        return [e.text for e in evs], s.interrupter.stopped
    finally:
        layers.remove()


def test_the_next_request_on_the_row_decodes_as_after_a_cancel_between_steps(engine: TextEngine) -> None:
    between, stopped_between = next_request_after(engine, mid_forward=False)
    mid, stopped_mid = next_request_after(engine, mid_forward=True)
    assert (stopped_between, stopped_mid) == (0, 1)
    assert mid == between and between[-1]
