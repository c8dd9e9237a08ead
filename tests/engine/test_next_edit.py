"""Next-edit suggestions (issue 34): edit-only passes over a committed region through the one
step loop, on the embedded model. Structure and invariants, not the small model's taste."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
import torch

from engine.api import CompletionRequest, EditSuggestion, EngineEvent, NextEditRequest, Plan
from engine.decoding.next_edit import RegionTokens, rewritten, suggestions_of, tokenize_region
from engine.decoding.rejections import Rejection, RejectKind
from engine.decoding.scheduler import Scheduler
from engine.service import TextEngine
from llada_lsp.engine_base import EngineClient, EngineJob, Progress
from llada_lsp.engine_client import InProcessEngine

PREFIX = "import os\n\n\n"
# renamed at its def, the old name left at the call
REGION = ("def count_lines(path):\n    with open(path) as f:\n        return len(f.readlines())\n\n\n"
          "def main():\n    print(count_line(os.environ['FILE']))\n")
SUFFIX = "\n\nif __name__ == '__main__':\n    main()\n"
GARBAGE = "def f(x):\n    return x +@@ qq] zz (( 7 7 7 )) ::\n"
UNICODE = "s = 'héllo wörld 😀 名前'\nprint(s, 'naïve', 'ĉu')\nt = 'ünïcödé 🎉 テスト' + s\n"


@pytest.fixture(scope="module")
def eng() -> Iterator[TextEngine]:
    yield TextEngine(threads=1)


def done_of(events: list[EngineEvent]) -> EngineEvent:
    assert events and events[-1].kind == "done", events[-1:]
    assert all(e.kind == "edit" for e in events[:-1])
    return events[-1]


def check_suggestions(region: str, done: EngineEvent, threshold: float) -> None:
    """Offsets inside the region, ordered and apart; confidences above the threshold; applying
    them all gives the done event's text."""
    last = -1
    for s in done.suggestions:
        assert 0 <= s.start <= s.end <= len(region)
        assert s.start > last or (s.start == last == s.end), done.suggestions  # disjoint, in order
        last = s.end
        assert threshold <= s.confidence <= 1.0 + 1e-6
        assert region[s.start:s.end] != s.text
        assert "<|" not in s.text  # never a special token's text
    assert rewritten(region, done.suggestions) == done.text


def test_passes_are_bounded_and_suggestions_apply(eng: TextEngine) -> None:
    for threshold, passes in ((None, 4), (0.1, 3), (0.3, 1)):
        req = NextEditRequest("r", "a.py", PREFIX, REGION, SUFFIX, threshold=threshold, max_passes=passes)
        done = done_of(list(eng.next_edit(req)))
        st = done.stats
        assert st is not None
        assert 1 <= st["forwards"] <= passes and st["forwards"] == st["passes"]
        assert st["tokens"] == len(eng.tok.encode(REGION).ids)
        # a pass that changed nothing ends it; only running out of passes ends it with edits pending
        assert done.reason in ("budget", "end_of_middle")
        if done.reason == "budget":  # passes ran out with edits still coming
            assert st["forwards"] == passes
        check_suggestions(REGION, done, threshold if threshold is not None else 0.8)
        assert (st["edited_tokens"] > 0) == bool(done.suggestions)


def test_a_low_threshold_on_garbage_must_suggest(eng: TextEngine) -> None:
    req = NextEditRequest("g", "g.py", PREFIX, GARBAGE, SUFFIX, threshold=1e-6, max_passes=2)
    done = done_of(list(eng.next_edit(req)))
    assert done.suggestions, "every token whose top differs from the draft is replaced at 1e-6"
    check_suggestions(GARBAGE, done, 1e-6)
    assert done.text != GARBAGE


def test_a_threshold_of_one_suggests_nothing_in_one_forward(eng: TextEngine) -> None:
    done = done_of(list(eng.next_edit(NextEditRequest("one", "a.py", PREFIX, REGION, SUFFIX, threshold=1.0))))
    assert done.suggestions == () and done.text == REGION
    assert done.stats is not None and done.stats["forwards"] == 1 and done.reason == "end_of_middle"


def test_forwards_are_the_models_calls(eng: TextEngine) -> None:
    calls = []
    hook = eng.model.register_forward_hook(lambda *_a: calls.append(1))
    try:
        eng.prompt_cache.clear()
        done = done_of(list(eng.next_edit(NextEditRequest("h", "h.py", PREFIX, GARBAGE, SUFFIX, threshold=0.05))))
    finally:
        hook.remove()
    assert done.stats is not None and done.stats["forwards"] == len(calls) >= 1


def test_unicode_offsets(eng: TextEngine) -> None:
    region = tokenize_region(eng.tok, UNICODE)
    assert any(len(eng.tok.decode([t])) and "\ufffd" in eng.tok.decode([t]) for t in region.ids)  # split chars
    for k, c in region.cuts.items():
        assert eng.tok.decode(region.ids[:k]) == UNICODE[:c]
    done = done_of(list(eng.next_edit(NextEditRequest("u", "u.py", PREFIX, UNICODE, "", threshold=1e-6))))
    assert done.suggestions
    check_suggestions(UNICODE, done, 1e-6)
    for s in done.suggestions:  # whole characters: the edit leaves no broken character behind
        assert "\ufffd" not in UNICODE[s.start:s.end]


class Chars:
    """A tokenizer of one character a token (ids are code points) for the merge rules."""

    def decode(self, ids: list[int]) -> str:
        return "".join(map(chr, ids))


def test_adjacent_replacements_merge_and_take_the_lowest_confidence() -> None:
    text = "abcdefgh"
    region = RegionTokens(text, [ord(c) for c in text], {i: i for i in range(len(text) + 1)})
    final = [ord(c) for c in "aXYdefZh"]
    conf = [1.0, 0.7, 0.4, 1.0, 1.0, 1.0, 0.9, 1.0]
    got = suggestions_of(region, final, conf, Chars())
    assert got == (EditSuggestion(1, 3, "XY", 0.4), EditSuggestion(6, 7, "Z", 0.9))
    # a token that spans characters is replaced whole, then trimmed to what changes
    region = RegionTokens("foo bar", [1, 2], {0: 0, 1: 3, 2: 7})

    class Words:
        def decode(self, ids: list[int]) -> str:
            return "".join({1: "foo", 2: " bar", 3: " baz"}[i] for i in ids)

    assert suggestions_of(region, [1, 3], [1.0, 0.6], Words()) == (EditSuggestion(6, 7, "z", 0.6),)


def run_loop(s: Scheduler, done: dict[str, EngineEvent], ids: list[str]) -> None:
    for _ in range(200):
        s.step()
        if all(i in done for i in ids):
            return
    raise AssertionError(f"not finished: {set(ids) - set(done)}")


def test_supersede_only_next_edits_of_the_document_and_cancel(eng: TextEngine) -> None:
    s = Scheduler(eng, max_batch=4)
    got: dict[str, EngineEvent] = {}
    why: dict[str, Rejection | None] = {}

    def emit(ev: EngineEvent, w: Rejection | None) -> None:
        if ev.kind in ("done", "error"):
            got[ev.request_id], why[ev.request_id] = ev, w

    s.submit_next_edit(NextEditRequest("ne1", "x.py", PREFIX, GARBAGE, SUFFIX, threshold=0.01), "c", emit)
    s.submit(CompletionRequest("cp", "x.py", PREFIX, SUFFIX, Plan(max_tokens=8)), "c", emit)
    s.submit_next_edit(NextEditRequest("ne2", "x.py", PREFIX, GARBAGE, SUFFIX, threshold=0.01), "c", emit)
    s.submit_next_edit(NextEditRequest("ne3", "y.py", PREFIX, GARBAGE, SUFFIX, threshold=0.01), "c", emit)
    s.cancel("ne3", "c")
    run_loop(s, got, ["ne1", "cp", "ne2", "ne3"])
    assert got["ne1"].reason == "superseded" and got["ne1"].suggestions == ()
    assert got["ne1"].stats is not None and got["ne1"].stats["forwards"] == 0
    assert got["cp"].kind == "done" and got["cp"].reason != "superseded"  # another stream of the document
    assert got["ne2"].kind == "done" and got["ne2"].suggestions
    assert got["ne3"].reason == "cancelled" and got["ne3"].stats["forwards"] == 0  # type: ignore[index]
    # a next-edit request is no remask target
    s.remask("ne2", [(0, 1)], "c", emit)
    del got["ne2"]
    run_loop(s, got, ["ne2"])
    assert got["ne2"].kind == "error" and why["ne2"] is not None and why["ne2"].kind is RejectKind.UNKNOWN_REQUEST


@pytest.mark.parametrize(("req", "kind"), [
    (NextEditRequest("e", "d", PREFIX, "", SUFFIX), RejectKind.BAD_REQUEST),
    (NextEditRequest("e", "d", PREFIX, REGION, SUFFIX, preset="one_per_step"), RejectKind.BAD_REQUEST),
    (NextEditRequest("e", "d", PREFIX, REGION, SUFFIX, preset="nope"), RejectKind.BAD_REQUEST),
    (NextEditRequest("e", "d", PREFIX, REGION, SUFFIX, threshold=0.0), RejectKind.BAD_REQUEST),
    (NextEditRequest("e", "d", PREFIX, REGION, SUFFIX, max_passes=0), RejectKind.BAD_REQUEST),
    (NextEditRequest("e", "d", PREFIX, "x = 1\n" * 400, SUFFIX), RejectKind.TOO_LONG),
])
def test_bad_requests_are_refused(eng: TextEngine, req: NextEditRequest, kind: RejectKind) -> None:
    s = Scheduler(eng, max_batch=1)
    out: list[tuple[EngineEvent, Rejection | None]] = []
    s.submit_next_edit(req, "c", lambda ev, w: out.append((ev, w)))
    s.step()
    assert len(out) == 1 and out[0][0].kind == "error" and out[0][1] is not None and out[0][1].kind is kind


def test_in_process_client_gives_the_loops_suggestions(eng: TextEngine) -> None:
    req = NextEditRequest("ip", "a.py", PREFIX, GARBAGE, SUFFIX, threshold=0.05, max_passes=3)
    eng.prompt_cache.clear()
    local = done_of(list(eng.next_edit(req)))

    async def run() -> tuple[list[EngineEvent], EngineEvent]:
        client = InProcessEngine(factory=lambda *_a, **_k: eng)
        await client.start(lambda _m, _p: None)
        client.set_deadlines(0, 0)
        try:
            eng.prompt_cache.clear()
            job = client.next_edit(req)
            comp = client.submit(CompletionRequest("c1", "a.py", PREFIX, SUFFIX, Plan(max_tokens=4)))
            evs = [e async for e, _ in job.events()]
            c_last = [e async for e, _ in comp.events()][-1]
            assert job.doc_key != comp.doc_key
            return evs, c_last
        finally:
            await client.close()

    evs, comp = asyncio.run(run())
    got = done_of(evs)
    assert comp.kind == "done" and comp.reason != "superseded"
    assert got.suggestions == local.suggestions and got.text == local.text
    assert got.stats is not None and local.stats is not None and got.stats["forwards"] == local.stats["forwards"]


def test_a_client_without_next_edit_says_so() -> None:
    class Plain(EngineClient):
        async def start(self, progress: Progress) -> None: ...

        def submit(self, request: CompletionRequest) -> EngineJob:
            raise NotImplementedError

        async def close(self) -> None: ...

    assert Plain().next_edit(NextEditRequest("r", "d", "", "x", "")) is None


def test_region_tokens_cover_the_text(eng: TextEngine) -> None:
    r = tokenize_region(eng.tok, REGION)
    assert r.cuts[0] == 0 and r.cuts[len(r.ids)] == len(REGION)
    assert torch.tensor(sorted(r.cuts)).diff().min() >= 1
