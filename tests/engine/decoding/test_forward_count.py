"""stats.forwards is every model forward a request caused (issue 30): a forward hook on the
model counts the real calls, and the final event's count must equal them for every preset,
alternatives (forks that outlast their primary) and remask passes included, in-process
(TextEngine) and in the daemon's scheduler, alone and sharing forwards with another request."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
import torch

from engine.api import CompletionRequest, EngineEvent, Plan
from engine.decoding.policies import PRESETS
from engine.decoding.scheduler import Scheduler
from engine.service import TextEngine

# a multi-line body after a block opener: no token healing (the forks get distinct first
# tokens) and a budget long enough that some alternatives outlast the primary
PREFIX = ("import os\n\n\ndef read_lines(path):\n    \"\"\"The stripped lines of a text file.\"\"\"\n"
          "    with open(path) as f:\n")
SUFFIX = "\n\n\ndef main():\n    print(read_lines(os.environ['FILE']))\n"
PLAN = Plan(max_tokens=40, stop="none", max_lines=3)


class Hooked:
    """Counts the calls of a model's forward (the hook fires once per call)."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.calls = 0
        self.rows: list[list[int]] = []  # the cache rows each call carried
        self._h = model.register_forward_hook(self._hook, with_kwargs=True)

    def _hook(self, _m: torch.nn.Module, _args: Any, kwargs: dict[str, Any], _out: Any) -> None:  # noqa: ANN401
        self.calls += 1
        rows = kwargs.get("rows")
        self.rows.append(sorted(set(rows.tolist())) if rows is not None else [0])

    def close(self) -> None:
        self._h.remove()


@pytest.fixture(scope="module")
def eng() -> Iterator[TextEngine]:
    yield TextEngine(threads=1)  # the embedded model, trained and committed


@pytest.fixture
def hook(eng: TextEngine) -> Iterator[Hooked]:
    h = Hooked(eng.model)
    yield h
    h.close()


def plan_for(preset: str, alternatives: int | None = None) -> Plan:
    return Plan(max_tokens=PLAN.max_tokens, stop=PLAN.stop, max_lines=PLAN.max_lines, preset=preset,
                alternatives=alternatives)


def complete(eng: TextEngine, rid: str, plan: Plan) -> EngineEvent:
    eng.prompt_cache.clear()
    return list(eng.complete(CompletionRequest(rid, "doc", PREFIX, SUFFIX, plan)))[-1]


# every registered preset, and speedy with alternatives (quality has them by default)
CASES = [(p, None) for p in sorted(PRESETS)] + [("speedy", 3)]


@pytest.mark.parametrize(("preset", "alternatives"), CASES)
def test_in_process_forwards_equal_the_model_calls(eng: TextEngine, hook: Hooked, preset: str,
                                                   alternatives: int | None) -> None:
    done = complete(eng, f"ip-{preset}", plan_for(preset, alternatives))
    assert done.kind == "done" and done.stats is not None
    assert done.stats["forwards"] == hook.calls > 0
    assert done.stats["tpf"] == done.stats["tokens"] / hook.calls


def test_alternatives_that_outlast_the_primary_are_counted(eng: TextEngine, hook: Hooked) -> None:
    """The regression: forks start after the primary's first draft and run on after it; the
    old count (the primary's own forwards) missed theirs."""
    done = complete(eng, "alts", plan_for("quality"))
    st = done.stats or {}
    assert st["alternative_rows"] > 0  # forks ran: the check is not vacuous
    assert st["forwards"] == hook.calls > st["primary_forwards"]
    assert max(len(r) for r in hook.rows) > 1  # forks shared the primary's forwards


def test_a_remask_counts_on_its_request(eng: TextEngine, hook: Hooked) -> None:
    first = complete(eng, "rm", plan_for("quality"))
    before = hook.calls
    assert first.stats is not None and first.stats["forwards"] == before
    done = list(eng.remask("rm", [(0, max(1, len(first.text) // 2))]))[-1]
    assert done.kind == "done" and done.stats is not None
    assert hook.calls > before  # the remask decoded
    assert done.stats["forwards"] == hook.calls  # the request's, remask passes included


# -- the daemon's scheduler --------------------------------------------------------------------
class Sink:
    def __init__(self) -> None:
        self.last: dict[str, EngineEvent] = {}

    def emit(self, ev: EngineEvent, _code: str | None) -> None:
        self.last[ev.request_id] = ev

    def finished(self, rids: list[str]) -> bool:
        return all(r in self.last and self.last[r].kind in ("done", "error") for r in rids)


def drive(s: Scheduler, sink: Sink, rids: list[str], limit: int = 3000) -> None:
    for _ in range(limit):
        if sink.finished(rids):
            return
        s.step()
    raise AssertionError("requests did not finish")


class RequestCounter:
    """Per request id, the model calls that carried any of its rows (a fork's rows count for
    its request), read from the scheduler's running rows at each call."""

    def __init__(self, s: Scheduler) -> None:
        self.s, self.seen = s, Counter[str]()
        self._h = s.engine.model.register_forward_hook(self._hook, with_kwargs=True)

    def _hook(self, _m: torch.nn.Module, _args: Any, kwargs: dict[str, Any], _out: Any) -> None:  # noqa: ANN401
        rows = set(kwargs["rows"].tolist())
        self.seen.update({(j.parent or j).req.request_id for j in self.s.running.values() if j.row in rows})

    def close(self) -> None:
        self._h.remove()


@pytest.fixture
def sched(eng: TextEngine) -> Scheduler:
    return Scheduler(eng, max_batch=6)


@pytest.mark.parametrize(("preset", "alternatives"), CASES)
def test_scheduler_forwards_equal_the_model_calls(sched: Scheduler, hook: Hooked, preset: str,
                                                  alternatives: int | None) -> None:
    sink = Sink()
    sched.engine.prompt_cache.clear()
    sched.submit(CompletionRequest("d", "doc", PREFIX, SUFFIX, plan_for(preset, alternatives)), "o", sink.emit)
    drive(sched, sink, ["d"])
    done = sink.last["d"]
    assert done.kind == "done" and done.stats is not None
    assert done.stats["forwards"] == hook.calls > 0
    if preset == "quality" or alternatives:
        assert done.stats["alternative_rows"] > 0 and done.stats["forwards"] > done.stats["primary_forwards"]


def test_scheduler_counts_shared_forwards_for_each_request(sched: Scheduler, hook: Hooked) -> None:
    """Two requests (one with alternatives) in the same forwards: each counts the forwards
    that carried any of its rows, once; none counts the other's prefill."""
    counter, sink = RequestCounter(sched), Sink()
    sched.engine.prompt_cache.clear()
    sched.submit(CompletionRequest("a", "doc-a", PREFIX, SUFFIX, plan_for("quality")), "o", sink.emit)
    sched.submit(CompletionRequest("b", "doc-b", "def add(a, b):\n", "", plan_for("speedy")), "p", sink.emit)
    try:
        drive(sched, sink, ["a", "b"])
    finally:
        counter.close()
    seen = counter.seen
    a, b = sink.last["a"].stats or {}, sink.last["b"].stats or {}
    assert a["alternative_rows"] > 0
    assert a["forwards"] == seen["a"] and b["forwards"] == seen["b"]
    assert a["forwards"] + b["forwards"] > hook.calls >= max(a["forwards"], b["forwards"])  # some were shared
