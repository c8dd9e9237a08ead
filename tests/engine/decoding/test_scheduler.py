"""Scheduler contract, stepped by hand: batched results equal solo ones; cancel, supersession,
dropped owners and deadlines take effect before the next forward; busy; crashes stay local."""

from __future__ import annotations

import dataclasses
import time
from collections import defaultdict

import pytest
import torch

from engine.api import CompletionRequest, EngineEvent, Plan
from engine.daemon.protocol import wire_code
from engine.decoding.decode import Staged
from engine.decoding.rejections import Rejection
from engine.decoding.scheduler import Scheduler
from engine.service import TextEngine
from tests.engine.daemon.daemon_helpers import build_tiny_checkpoint

PREFIX = "def fibonacci(n):\n    if n < 2:\n        return n\n    "
PROMPTS = [
    (PREFIX, "\n\nprint(fibonacci(10))\n", Plan(max_tokens=16)),
    ("import os\n\nclass Runtime:\n    def __init__(self, path):\n        self.", "", Plan(max_tokens=12, stop="line")),
    ("for i in range(", "):\n    pass\n", Plan(max_tokens=20, preset="quality", alternatives=1)),
]


class Sink:
    def __init__(self) -> None:
        self.events: dict[str, list[tuple[EngineEvent, str | None]]] = defaultdict(list)

    def emit_for(self, owner: str):  # noqa: ANN201
        def emit(ev: EngineEvent, why: Rejection | None) -> None:
            self.events[ev.request_id].append((ev, wire_code(why)))  # the daemon's mapping
        return emit

    def last(self, rid: str) -> EngineEvent:
        return self.events[rid][-1][0]

    def done(self, rid: str) -> bool:
        return bool(self.events[rid]) and self.last(rid).kind in ("done", "error")


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> TextEngine:
    """The daemon tests' tiny checkpoint, in process (the step loop is the daemon's)."""
    return TextEngine(build_tiny_checkpoint(tmp_path_factory.mktemp("tiny-model")), max_prompt_tokens=256)


def run_until_done(s: Scheduler, sink: Sink, rids: list[str], limit: int = 2000) -> None:
    for _ in range(limit):
        if all(sink.done(r) for r in rids):
            return
        s.step()
    raise AssertionError("requests did not finish")


def test_batched_equals_solo_and_in_process(engine: TextEngine) -> None:
    s, sink = Scheduler(engine, max_batch=4), Sink()
    solo = []
    for i, (pre, suf, plan) in enumerate(PROMPTS):
        engine.prompt_cache.clear()
        s.submit(CompletionRequest(f"solo{i}", f"doc{i}", pre, suf, plan), "a", sink.emit_for("a"))
        run_until_done(s, sink, [f"solo{i}"])
        solo.append([(e.kind, e.text) for e, _ in sink.events[f"solo{i}"]])
    engine.prompt_cache.clear()
    for i, (pre, suf, plan) in enumerate(PROMPTS):
        s.submit(CompletionRequest(f"b{i}", f"other{i}", pre, suf, plan), f"c{i}", sink.emit_for(f"c{i}"))
    run_until_done(s, sink, [f"b{i}" for i in range(len(PROMPTS))])
    assert s.counters["max_batch_seen"] == len(PROMPTS)
    for i in range(len(PROMPTS)):
        assert [(e.kind, e.text) for e, _ in sink.events[f"b{i}"]] == solo[i]
        assert sink.last(f"b{i}").kind == "done" and sink.last(f"b{i}").stats["avg_batch"] > 1
    # the in-process engine gives the same text (row 0 of the same multi-row cache)
    engine.prompt_cache.clear()
    pre, suf, plan = PROMPTS[0]
    events = list(engine.complete(CompletionRequest("ip", "ip", pre, suf, plan)))
    assert [(e.kind, e.text) for e in events] == solo[0]


def test_prefills_run_alone_and_decode_steps_together(engine: TextEngine) -> None:
    """Ragged prompt prefills are not padded to one another: each new arrival's prefill is its
    own forward; the decode steps after it are one forward for every running request."""
    s, sink = Scheduler(engine, max_batch=4, prefill_split=4), Sink()
    engine.prompt_cache.clear()
    for i, (pre, suf, plan) in enumerate(PROMPTS):
        s.submit(CompletionRequest(f"p{i}", f"pdoc{i}", pre, suf, plan), "a", sink.emit_for("a"))
    s.step()
    assert (s.counters["forwards"], s.counters["batched_rows"], s.counters["max_batch_seen"]) == (3, 3, 1)
    s.step()
    assert (s.counters["forwards"], s.counters["batched_rows"], s.counters["max_batch_seen"]) == (4, 6, 3)
    run_until_done(s, sink, [f"p{i}" for i in range(len(PROMPTS))])


def test_decode_feeds_split_where_padding_costs_more_than_a_forward(engine: TextEngine) -> None:
    from types import SimpleNamespace

    s = Scheduler(engine, max_batch=8, forward_cost_tokens=48, pack=False)

    def lengths(ns: list[int]) -> list[list[int]]:
        feeds = [(SimpleNamespace(row=i), SimpleNamespace(ids=[0] * n)) for i, n in enumerate(ns)]
        return [[len(f.ids) for _, f in g] for g in s._groups(feeds)]  # type: ignore[arg-type]

    assert lengths([]) == [] and lengths([32]) == [[32]]
    assert lengths([16] * 8) == [[16] * 8]
    # seven rows at 16 padded to one at 32 cost 256 + 48 > 112 + 48 + 32 + 48
    assert lengths([32, 16, 16, 16, 16, 16, 16, 16]) == [[16] * 7, [32]]
    # one short row among long ones: padding it (16 more) is cheaper than a forward (48)
    assert lengths([16, 32, 32, 32, 32, 32, 32, 32]) == [[16] + [32] * 7]
    s.pack = True  # packed (the CPU default): one forward of block-sized pieces, nothing to split
    assert lengths([32, 16, 16, 16, 16, 16, 16, 16]) == [[32] + [16] * 7]


def test_packed_pieces_compute_what_padded_rows_compute(engine: TextEngine) -> None:
    """Two prompts' first feeds (prompt + first block, ragged) in one forward: padded to the
    longest, or cut into 16-token pieces that write and read their own cache row. Same logits,
    same cache."""
    from engine.decoding.batch import execute, new_slot_attrs, pieces_of
    from engine.decoding.decode_bidir import make_sequence
    from engine.decoding.policies import make_policy

    model = engine.model
    model.setup_cache(2, engine.max_len)
    prompts = [engine.encode(pre, suf)[0] for pre, suf, _ in PROMPTS[:2]]

    def run(chunk: int) -> tuple[list[torch.Tensor], list[torch.Tensor], int]:
        seqs = [make_sequence(model, ids, make_policy("quality"), 16, row=i, max_len=engine.max_len)
                for i, ids in enumerate(prompts)]
        feeds = [q.prepare() for q in seqs]
        attrs = [new_slot_attrs(model.cache_len, q.clean_len) for q in seqs]
        out = execute(model, seqs, feeds, attrs, chunk=chunk)
        used = max(f.kv_len for f in feeds)
        return out, [c.k[:2, :used].clone() for c in model.kv_caches()], len(pieces_of(feeds, chunk))

    padded, k_padded, n_padded = run(0)
    packed, k_packed, n_packed = run(16)
    assert n_padded == 2 and n_packed > 4  # both prompts are longer than two pieces
    for a, b in zip(padded, packed, strict=True):
        assert a.shape == b.shape and torch.allclose(a, b, atol=1e-4)
    for a, b in zip(k_padded, k_packed, strict=True):
        assert torch.allclose(a, b, atol=1e-5)


def long_req(rid: str, doc: str) -> CompletionRequest:
    return CompletionRequest(rid, doc, PREFIX, "", Plan(max_tokens=64, preset="one_per_step"))


def test_cancel_within_one_step_and_no_supersession_of_its_own(engine: TextEngine) -> None:
    s, sink = Scheduler(engine, max_batch=4), Sink()
    emit = sink.emit_for("o")
    s.submit(long_req("a", "d1"), "o", emit)
    s.submit(long_req("x", "d2"), "o", emit)
    s.step()
    s.step()
    s.cancel("a", "o")
    s.step()
    ev = sink.last("a")
    assert ev.kind == "done" and ev.reason == "cancelled" and ev.step == 2
    assert s.running[("o", "x")].seq.forwards == 3  # the other request went on
    # same document: the loop decides no supersession (the client's rule cancels the older one)
    s.submit(long_req("x2", "d2"), "o", emit)
    s.step()
    x, x2 = s.running[("o", "x")].seq, s.running[("o", "x2")].seq
    assert x is not None and x2 is not None and (x.forwards, x2.forwards) == (4, 1)
    assert not sink.done("x")
    s.cancel("x", "o")  # what it is told
    s.step()
    ev = sink.last("x")
    assert ev.kind == "done" and ev.reason == "cancelled" and ev.step == 4
    assert x2.forwards == 2 and ("o", "x") not in s.running and "superseded" not in s.snapshot()
    s.cancel("unknown", "o")  # cancelling an unknown id is a no-op
    s.step()
    assert len(s.free_rows) == 3


def test_busy_fair_rows_drop_owner_and_deadline(engine: TextEngine) -> None:
    s, sink = Scheduler(engine, max_batch=2), Sink()
    s.submit(long_req("a", "d1"), "A", sink.emit_for("A"))
    s.submit(long_req("b", "d2"), "A", sink.emit_for("A"))
    s.submit(long_req("a3", "d5"), "A", sink.emit_for("A"))
    s.step()
    ev, code = sink.events["a3"][-1]  # one owner holds every row: no hidden queue
    assert ev.kind == "error" and code == "busy" and "busy" in (ev.error or "")
    s.submit(long_req("c", "d3"), "B", sink.emit_for("B"))  # another owner: A's newest gives its row up
    s.step()
    ev, code = sink.events["b"][-1]
    assert ev.kind == "error" and code == "busy" and "another connection" in (ev.error or "")
    assert sink.last("c").kind == "draft" and sorted(s.running) == [("A", "a"), ("B", "c")]
    s.drop_owner("A")  # A disconnected: its row comes back before the next forward
    s.step()
    assert sink.last("a").reason == "cancelled"
    assert list(s.running) == [("B", "c")]
    s.submit(long_req("late", "d4"), "B", sink.emit_for("B"), deadline_ms=1)
    s.step()
    t = time.perf_counter()
    while time.perf_counter() < t + 0.005:
        pass
    s.step()
    assert sink.last("late").kind == "done" and sink.last("late").reason == "deadline"
    assert s.counters["busy"] == 1 and s.counters["preempted"] == 1 and s.counters["deadline"] == 1


def ok_and_long_bad(engine: TextEngine) -> tuple[Scheduler, Sink]:
    """A scheduler of 3 rows one step into a short request "ok" and a long one "bad" (owner "o")."""
    s, sink = Scheduler(engine, max_batch=3), Sink()
    emit = sink.emit_for("o")
    pre, suf, plan = PROMPTS[0]
    s.submit(CompletionRequest("ok", "d1", pre, suf, plan), "o", emit)
    s.submit(long_req("bad", "d2"), "o", emit)
    s.step()
    return s, sink


def test_crash_fails_only_that_request_and_remask(engine: TextEngine) -> None:
    s, sink = ok_and_long_bad(engine)
    emit = sink.emit_for("o")
    pre, suf, _ = PROMPTS[0]
    job = s.running[("o", "bad")]

    def boom(staged: object, conf: object) -> None:
        raise RuntimeError("injected failure")
    job.seq.commit = boom  # type: ignore[method-assign, assignment]
    run_until_done(s, sink, ["ok", "bad"])
    ev, code = sink.events["bad"][-1]
    assert ev.kind == "error" and code == "internal" and "injected failure" in (ev.error or "")
    assert sink.last("ok").kind == "done"
    text = sink.last("ok").text
    s.remask("ok", [(0, max(1, len(text) // 2))], "o", emit)
    n = len(sink.events["ok"])
    run_until_done(s, sink, ["ok"])
    for _ in range(500):
        if sink.events["ok"][-1][0].kind == "done" and len(sink.events["ok"]) > n:
            break
        s.step()
    assert sink.events["ok"][-1][0].kind == "done" and len(sink.events["ok"]) > n
    s.remask("nope", [(0, 1)], "o", emit)
    s.step()
    assert sink.events["nope"][-1][1] == "unknown_request"
    bad_plan = CompletionRequest("p", "d9", pre, suf, Plan(preset="warp-speed"))
    s.submit(bad_plan, "o", emit)
    s.step()
    assert sink.events["p"][-1][1] == "invalid_plan"
    assert len(s.free_rows) == 3


def test_alternatives_ride_along_and_give_their_rows_to_new_requests(engine: TextEngine) -> None:
    pre, suf, _ = PROMPTS[0]
    plan = Plan(max_tokens=16, alternatives=3)
    engine.prompt_cache.clear()
    ip = list(engine.complete(CompletionRequest("ip", "ip", pre, suf, plan)))[-1]
    s, sink = Scheduler(engine, max_batch=4), Sink()
    engine.prompt_cache.clear()
    s.submit(CompletionRequest("r", "d", pre, suf, plan), "a", sink.emit_for("a"))
    run_until_done(s, sink, ["r"])
    done = sink.last("r")
    # the daemon's candidates are the in-process engine's, decoded in the same forwards
    assert done.kind == "done" and done.text == ip.text and done.alternatives == ip.alternatives
    assert s.counters["max_batch_seen"] == 3 and done.stats["avg_batch"] > 1
    assert len(s.free_rows) == 4 and not s.running
    # every row taken by a request and its two forks plus one more request: a newcomer takes
    # a fork's row instead of getting "busy"; a cancel gives every row back
    s = Scheduler(engine, max_batch=4)
    s.submit(long_req("x", "dx"), "b", sink.emit_for("b"))
    s.submit(CompletionRequest("y", "dy", pre, suf, Plan(max_tokens=64, alternatives=3)), "b", sink.emit_for("b"))
    for _ in range(50):  # the forks start once y's first draft is complete
        s.step()
        if s.snapshot()["alternative_rows"]:
            break
    assert len(s.running) == 4 and not s.free_rows
    assert s.snapshot()["running"] == 2 and s.snapshot()["alternative_rows"] == 2
    s.submit(long_req("z", "dz"), "c", sink.emit_for("c"))
    s.step()
    assert s.counters["busy"] == 0 and ("c", "z") in s.running and len(s.running) == 4
    for rid in ("x", "y"):
        s.cancel(rid, "b")
    s.step()
    assert sink.last("y").reason == "cancelled" and list(s.running) == [("c", "z")] and len(s.free_rows) == 3


def test_a_fork_that_fails_to_start_leaves_its_request_alone(engine: TextEngine,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("no room for an alternative")

    monkeypatch.setattr(engine, "fork", broken)
    pre, suf, _ = PROMPTS[0]
    s, sink = Scheduler(engine, max_batch=4), Sink()
    s.submit(CompletionRequest("r", "d", pre, suf, Plan(max_tokens=16, alternatives=3)), "a", sink.emit_for("a"))
    run_until_done(s, sink, ["r"])
    done = sink.last("r")
    assert done.kind == "done" and done.alternatives == () and s.counters["errors"] == 0
    assert len(s.free_rows) == 4 and not s.running


def test_a_row_that_breaks_the_steps_confidence_call_fails_alone(engine: TextEngine) -> None:
    """The confidences of a step's rows come from one `confidences` call; a row whose staged
    rows break it is found by calling per row, and fails alone."""
    s, sink = ok_and_long_bad(engine)
    seq = s.running[("o", "bad")].seq
    assert seq is not None
    orig = seq.stage

    def skewed(logits: torch.Tensor) -> Staged:
        st = orig(logits)
        return dataclasses.replace(st, current=torch.cat([st.current, st.current[:1]]))
    seq.stage = skewed  # type: ignore[method-assign]
    run_until_done(s, sink, ["ok", "bad"])
    ev, code = sink.events["bad"][-1]
    assert ev.kind == "error" and code == "internal"
    assert sink.last("ok").kind == "done" and s.counters["completed"] == 1
    assert not s.running and len(s.free_rows) == 3
