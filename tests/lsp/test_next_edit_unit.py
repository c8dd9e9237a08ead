"""`llada/nextEdit` without a model: the window and mapping helpers (llada_lsp.edit_window) and
the service's supersession, staleness and backends without next-edit (a scripted engine)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from engine.api import CompletionRequest, EditSuggestion, EngineEvent, NextEditRequest
from llada_lsp.documents import DocumentStore
from llada_lsp.edit_window import (
    Suggested,
    by_line,
    lsp_suggestion,
    mangled,
    prompt_around,
    regions,
    touches,
)
from llada_lsp.engine_base import EngineClient, EngineJob, Progress
from llada_lsp.next_edit import NextEditParams, NextEditParamsError, NextEditService, parse_params
from llada_lsp.options import parse_options
from llada_lsp.positions import LineIndex

LINES = [f"line{k}" for k in range(30)]
TEXT = "\n".join(LINES) + "\n"


def test_regions_leave_the_kept_lines_out_below_first() -> None:
    index = LineIndex.of(TEXT)
    below, above = regions(index, (10, 11), 3, 10_000)
    assert (below.side, below.first, below.last) == ("below", 12, 14)
    assert TEXT[below.start:below.end] == "line12\nline13\nline14\n"
    assert (above.side, above.first, above.last) == ("above", 7, 9)
    assert TEXT[above.start:above.end] == "line7\nline8\nline9\n"


def test_regions_drop_the_farthest_lines_first_and_stop_at_the_ends() -> None:
    index = LineIndex.of(TEXT)
    below, above = regions(index, (10, 10), 5, 14)  # two 7-character lines a side
    assert (below.first, below.last, above.first, above.last) == (11, 12, 8, 9)
    only = regions(index, (0, 0), 5, 10_000)
    assert [r.side for r in only] == ["below"]
    assert regions(LineIndex.of("a\n\n  \n"), (0, 0), 5, 100) == []  # whitespace only


def test_prompt_around_cuts_at_line_boundaries() -> None:
    index = LineIndex.of(TEXT)
    below = regions(index, (10, 10), 2, 10_000)[0]
    prefix, suffix = prompt_around(TEXT, below, 15, 15)
    assert prefix == "line9\nline10\n"  # "ine8\n" cut: a bounded prefix starts a line
    assert suffix == "line13\nline14\n"
    whole_prefix, _ = prompt_around(TEXT, below, 10_000, 0)
    assert whole_prefix == TEXT[:below.start]


def test_by_line_merges_a_lines_suggestions_keeping_the_text_between() -> None:
    text = "a = foo(bar, baz)\nb = 1\n"
    index = LineIndex.of(text)
    merged = by_line(text, index, [Suggested(4, 7, "qux", 0.5), Suggested(13, 16, "zap", 0.3),
                                   Suggested(18, 19, "c", 0.9)])
    assert merged == [Suggested(4, 16, "qux(bar, zap", 0.3), Suggested(18, 19, "c", 0.9)]


def test_touches_counts_a_joined_line_break() -> None:
    text = "a\nb\nc\n"
    index = LineIndex.of(text)
    assert touches(index, Suggested(1, 2, "", 1.0), (1, 1))  # "a\n" -> "a": joins line 1
    assert not touches(index, Suggested(0, 1, "x", 1.0), (1, 1))
    assert not touches(index, Suggested(4, 5, "y", 1.0), (1, 1))


def test_a_split_character_is_mangled() -> None:
    text = "s = 'é'\n"
    assert mangled(text, Suggested(5, 6, "\ufffd", 0.5))
    assert not mangled(text, Suggested(5, 6, "è", 0.5))
    assert not mangled("s = '\ufffd'\n", Suggested(5, 6, "\ufffd!", 0.5))  # it was there


def test_lsp_suggestion_counts_utf16_units() -> None:
    text = "x = 1\ns = '😀é' + tyop\n"
    index = LineIndex.of(text)
    at = text.index("tyop")
    d = lsp_suggestion(text, index, Suggested(at, at + 4, "typo", 0.25), "utf-16")
    # 11 code points before "tyop"; '😀' is two UTF-16 units (four UTF-8 bytes, 'é' two)
    assert d == {"range": {"start": {"line": 1, "character": 12}, "end": {"line": 1, "character": 16}},
                 "newText": "typo", "oldText": "tyop", "confidence": 0.25, "line": 1}
    assert lsp_suggestion(text, index, Suggested(at, at + 4, "typo", 0.25), "utf-8")["range"]["start"] \
        == {"line": 1, "character": 15}


def test_parse_params() -> None:
    p = parse_params({"textDocument": {"uri": "file:///a", "version": 3}, "position": {"line": 2, "character": 1},
                      "range": {"start": {"line": 5, "character": 0}, "end": {"line": 1, "character": 0}}})
    assert p == NextEditParams("file:///a", 3, 2, 1, (1, 5))
    for bad in ({}, {"textDocument": {"uri": "file:///a"}},
                {"textDocument": {"uri": "file:///a"}, "position": {"line": -1, "character": 0}},
                {"textDocument": {"uri": "file:///a", "version": "2"}, "position": {"line": 0, "character": 0}}):
        with pytest.raises(NextEditParamsError):
            parse_params(bad)


# -- the service, on a scripted engine ----------------------------------------------------------
class ScriptedEngine(EngineClient):
    """next_edit jobs that finish when the test says (`finish`), with suggestions replacing each
    region's first word by an upper-case copy."""

    def __init__(self) -> None:
        super().__init__()
        self.state = "ready"
        self.jobs: list[EngineJob] = []

    async def start(self, progress: Progress) -> None:
        self.state = "ready"

    def submit(self, request: CompletionRequest) -> EngineJob:  # pragma: no cover - not used
        raise AssertionError("completions are not asked for")

    def next_edit(self, request: NextEditRequest) -> EngineJob:
        job = EngineJob(request, asyncio.get_running_loop())
        self.jobs.append(job)
        return job

    def finish(self, k: int) -> None:
        job = self.jobs[k]
        req = job.request
        assert isinstance(req, NextEditRequest)
        if job.cancelled:
            job.push(EngineEvent("done", req.request_id, req.region, reason="superseded"))
            return
        word = req.region.split("\n", 1)[0]
        job.push(EngineEvent("done", req.request_id, req.region, reason="end_of_middle",
                             suggestions=(EditSuggestion(0, len(word), word.upper(), 0.5),)))

    async def close(self) -> None:
        return None


class NoNextEdit(ScriptedEngine):
    next_edit = EngineClient.next_edit  # type: ignore[assignment] # the base's: no entry point


def service(engine: EngineClient, **opts: Any) -> tuple[NextEditService, DocumentStore]:
    store = DocumentStore(1_000_000)
    store.open("file:///a.py", "python", 1, TEXT)
    options = parse_options({"nextEdit": {"windowLines": 3, **opts}})[0]
    return NextEditService(store, engine, options, lambda: "utf-16"), store


async def until(cond: Any) -> None:
    """Let the event loop run until `cond()` (bounded)."""
    for _ in range(200):
        if cond():
            return
        await asyncio.sleep(0)
    raise AssertionError("condition never held")


async def test_suggestions_from_both_sides_mapped_onto_the_document() -> None:
    eng = ScriptedEngine()
    svc, _ = service(eng)
    task = asyncio.ensure_future(svc.suggest(NextEditParams("file:///a.py", 1, 10, 2)))
    await until(lambda: len(eng.jobs) == 1)
    assert eng.jobs[0].request.region.startswith("line11\n")  # type: ignore[union-attr]
    assert eng.jobs[0].request.prefix.endswith("line10\n")  # type: ignore[union-attr]
    eng.finish(0)
    await until(lambda: len(eng.jobs) == 2)
    assert eng.jobs[1].request.region.startswith("line7\n")  # type: ignore[union-attr]
    eng.finish(1)
    ans = (await task).to_json()
    assert ans == {"version": 1, "suggestions": [
        {"range": {"start": {"line": 7, "character": 0}, "end": {"line": 7, "character": 5}},
         "newText": "LINE7", "oldText": "line7", "confidence": 0.5, "line": 7},
        {"range": {"start": {"line": 11, "character": 0}, "end": {"line": 11, "character": 6}},
         "newText": "LINE11", "oldText": "line11", "confidence": 0.5, "line": 11}]}


async def test_a_newer_request_supersedes_and_an_edit_makes_stale() -> None:
    eng = ScriptedEngine()
    svc, store = service(eng)
    first = asyncio.ensure_future(svc.suggest(NextEditParams("file:///a.py", 1, 10, 0)))
    await until(lambda: len(eng.jobs) == 1)
    second = asyncio.ensure_future(svc.suggest(NextEditParams("file:///a.py", 1, 12, 0)))
    await until(lambda: len(eng.jobs) == 2)
    assert eng.jobs[0].cancelled and eng.jobs[0].cancel_reason == "superseded"
    eng.finish(0)
    assert (await first).to_json() == {"version": 1, "suggestions": [], "reason": "superseded"}
    svc.document_changed("file:///a.py")  # a didChange while the second runs
    eng.finish(1)
    assert (await second).reason == "document changed"
    ans = await svc.suggest(NextEditParams("file:///a.py", 0, 10, 0))
    assert ans.suggestions == [] and ans.reason.startswith("stale") and len(eng.jobs) == 2
    assert store.get("file:///a.py").version == 1


async def test_a_backend_without_next_edit_and_the_option_off() -> None:
    eng = NoNextEdit()
    svc, _ = service(eng)
    assert not eng.has_next_edit and ScriptedEngine().has_next_edit
    assert not svc.available
    ans = await svc.suggest(NextEditParams("file:///a.py", 1, 10, 0))
    assert ans.suggestions == [] and "no next-edit" in ans.reason
    off, _ = service(ScriptedEngine(), enabled=False)
    assert not off.available
    assert "off" in (await off.suggest(NextEditParams("file:///a.py", 1, 10, 0))).reason


async def test_cancel_request_cancels_the_engine_job() -> None:
    eng = ScriptedEngine()
    svc, _ = service(eng)
    task = asyncio.ensure_future(svc.suggest(NextEditParams("file:///a.py", 1, 10, 0)))
    await until(lambda: len(eng.jobs) == 1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert eng.jobs[0].cancelled and svc.jobs == {}

