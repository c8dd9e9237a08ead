"""`llada/nextEdit` without a model: the suggestion helpers (llada_lsp.nextedit.edit_window) and the
service on a scripted engine (analysis suggestions, masked fills, the gate, supersession)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from engine.api import CompletionRequest, EngineEvent
from llada_lsp.engines.engine_base import EngineClient, EngineJob, Progress
from llada_lsp.nextedit.edit_analysis import Site
from llada_lsp.nextedit.edit_window import (
    Suggested,
    from_fill,
    from_placeholder,
    keep,
    lsp_suggestion,
    one_argument,
    site_suggestions,
    touches,
)
from llada_lsp.nextedit.next_edit import (
    NextEditParams,
    NextEditParamsError,
    NextEditService,
    parse_params,
)
from llada_lsp.options import parse_options
from llada_lsp.text.documents import DocumentStore
from llada_lsp.text.positions import LineIndex

URI = "file:///a.py"
TEXT = '''def area(w, h):
    return w * h


def main(width, height):
    a = area(width, height)
    b = area(2, 3)
    return a + b
'''


def test_one_argument_cuts_at_the_first_top_level_comma_or_closer() -> None:
    assert one_argument("scale, 2)") == "scale"
    assert one_argument("f(a, b), c") == "f(a, b)"
    assert one_argument("'a,b')\n") == "'a,b'"
    assert one_argument(" x\ny") == "x"
    assert one_argument(")") == ""
    assert from_fill(Site(3, 3, None, ", ", ""), ")", 0.9) is None


def test_touches_counts_a_joined_line_break() -> None:
    index = LineIndex.of("a\nb\nc\n")
    assert touches(index, Suggested(1, 2, "", 1.0), (1, 1))
    assert not touches(index, Suggested(0, 1, "x", 1.0), (1, 1))


def test_keep_drops_parse_errors_no_ops_and_the_kept_lines() -> None:
    text = "x = f(1)\ny = f(2)\nz = f(3)\n"
    index = LineIndex.of(text)
    at1, at2, at3 = text.index("1)"), text.index("2)"), text.index("3)")
    found = [Suggested(at1 + 1, at1 + 1, ", k", 1.0), Suggested(at2 + 1, at2 + 1, ", k k", 1.0),
             Suggested(at3, at3 + 1, "3", 1.0), Suggested(at3 + 1, at3 + 1, ", q", 1.0)]
    got = keep("python", text, index, found, (0, 0), 0)
    assert got == [Suggested(at3 + 1, at3 + 1, ", q", 1.0)]


def test_keep_falls_back_at_the_span_of_a_fill_that_adds_a_parse_error() -> None:
    text = "x = f(1)\ny = f(2)\nz = f(3)\n"
    index = LineIndex.of(text)
    at1, at2 = text.index("1)") + 1, text.index("2)") + 1
    sites = [Site(at1, at1, None, ", ", "", "k"), Site(at2, at2, None, ", ", "", "k")]
    fills = [from_fill(sites[0], "a b", 0.9), from_fill(sites[1], "4", 0.9)]
    found, holders = site_suggestions(sites, fills)
    assert set(holders) == {(at1, at1), (at2, at2)}
    got = keep("python", text, index, found, (2, 2), 0, None, holders)
    assert [(s.start, s.text, s.source) for s in got] == [(at1, ", k", "placeholder"), (at2, ", 4", "model")]
    assert [s.text for s in keep("python", text, index, found, (2, 2), 0)] == [", 4"]  # no fallback given
    bad = {(at1, at1): Suggested(at1, at1, ", k k", 0.0, "placeholder")}  # a fallback that does not parse
    assert [s.text for s in keep("python", text, index, found, (2, 2), 0, None, bad)] == [", 4"]
    # placeholders off: an unfilled site gives nothing and nothing to fall back to
    assert site_suggestions(sites, [None, fills[1]], placeholders=False) == ([fills[1]], {})


def test_lsp_suggestion_counts_utf16_units() -> None:
    text = "x = 1\ns = '😀é' + tyop\n"
    index = LineIndex.of(text)
    at = text.index("tyop")
    d = lsp_suggestion(text, index, Suggested(at, at + 4, "typo", 0.25, "model"), "utf-16")
    assert d == {"range": {"start": {"line": 1, "character": 12}, "end": {"line": 1, "character": 16}},
                 "newText": "typo", "oldText": "tyop", "confidence": 0.25, "line": 1, "source": "model"}


def test_a_placeholder_marks_the_name_in_code_units() -> None:
    text = "s = '😀é'; f(a)\n"
    index = LineIndex.of(text)
    at = text.index("a)") + 1
    assert from_placeholder(Site(at, at, "x")) is None and from_placeholder(Site(at, at, None, ", ", "")) is None
    s = from_placeholder(Site(at, at, None, ", größe=", "", "größe"))
    assert s == Suggested(at, at, ", größe=größe", 0.0, "placeholder", (8, 13))
    for enc, (a, b) in (("utf-16", (8, 13)), ("utf-8", (10, 17)), ("utf-32", (8, 13))):
        d = lsp_suggestion(text, index, s, enc)
        assert d["placeholder"] == {"start": a, "end": b} and d["source"] == "placeholder" and d["confidence"] == 0
    d = lsp_suggestion(text, index, s, "utf-16")
    assert d["range"]["start"]["character"] == len("s = '😀é'; f(a") + 1  # 😀: two UTF-16 units
    emoji = from_placeholder(Site(at, at, None, "😀=", "", "v"))
    assert emoji is not None and lsp_suggestion(text, index, emoji, "utf-16")["placeholder"] == {"start": 3, "end": 4}


def test_parse_params() -> None:
    p = parse_params({"textDocument": {"uri": "file:///a", "version": 3}, "position": {"line": 2, "character": 1},
                      "range": {"start": {"line": 5, "character": 0}, "end": {"line": 1, "character": 0}}})
    assert p == NextEditParams("file:///a", 3, 2, 1, (1, 5))
    for bad in ({}, {"textDocument": {"uri": "file:///a"}},
                {"textDocument": {"uri": "file:///a"}, "position": {"line": -1, "character": 0}}):
        with pytest.raises(NextEditParamsError):
            parse_params(bad)


# -- the service, on a scripted engine ----------------------------------------------------------
class ScriptedEngine(EngineClient):
    """Completion jobs (masked fills) that finish when the test says, with the text and weakest
    confidence it gives."""

    def __init__(self) -> None:
        super().__init__()
        self.state = "ready"
        self.jobs: list[EngineJob] = []

    async def start(self, progress: Progress) -> None:
        self.state = "ready"

    def submit(self, request: CompletionRequest) -> EngineJob:
        job = self.new_job(request, EngineJob)  # the bookkeeping every client shares (supersession)
        self.jobs.append(job)
        return job

    def finish(self, k: int, text: str, conf: float) -> None:
        job = self.jobs[k]
        job.push(EngineEvent("done", job.request.request_id, text,
                             reason="superseded" if job.cancelled else "end_of_middle",
                             stats={"min_confidence": conf}))

    async def close(self) -> None:
        return None


def service(**opts: Any) -> tuple[NextEditService, DocumentStore, ScriptedEngine]:
    store = DocumentStore(1_000_000)
    store.open(URI, "python", 1, TEXT)
    eng = ScriptedEngine()
    options = parse_options({"nextEdit": {"enabled": True, "threshold": 0.5, **opts}})[0]
    svc = NextEditService(store, eng, options, lambda: "utf-16")
    svc.typing_hold_s = 0.0  # no wait mid-word here (test_next_edit_typing.py tests it)
    return svc, store, eng


def edit(svc: NextEditService, store: DocumentStore, old: str, new: str, version: int) -> None:
    doc = store.get(URI)
    svc.document_changing(doc)
    store.change(URI, version, [SimpleNamespace(text=doc.text.replace(old, new, 1))], "utf-16")
    svc.document_changed(URI)


async def until(cond: Any) -> None:
    """Poll `cond` (the analysis runs on the service's worker thread first), for 60 s at most."""
    for _ in range(6000):
        if cond():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition never held")


async def test_a_rename_is_answered_by_the_analysis_without_the_engine() -> None:
    svc, store, eng = service()
    edit(svc, store, "def main(width, height)", "def main(wide, height)", 2)
    ans = (await svc.suggest(NextEditParams(URI, 2, 4, 12))).to_json()
    assert ans["kind"] == "rename" and eng.jobs == []
    assert [(s["range"]["start"]["line"], s["oldText"], s["newText"], s["source"]) for s in ans["suggestions"]] \
        == [(5, "width", "wide", "analysis")]
    # the rename is not done yet: the base stays; once the use is renamed too, it settles
    edit(svc, store, "area(width, height)", "area(wide, height)", 3)
    settled = await svc.suggest(NextEditParams(URI, 3, 5, 12))
    assert settled.suggestions == [] and settled.reason.startswith("no follow-up: rename")
    assert svc.bases[URI].text == store.get(URI).text


async def added_parameter(fills: list[tuple[str, float]], **opts: Any) -> tuple[Any, ScriptedEngine]:
    """`scale` added to `area`'s def; each call's fill answered with `fills` (text, confidence)."""
    svc, store, eng = service(**opts)
    edit(svc, store, "def area(w, h)", "def area(w, h, scale)", 2)
    task = asyncio.ensure_future(svc.suggest(NextEditParams(URI, 2, 0, 20)))
    await until(lambda: len(eng.jobs) == len(fills))
    for k, (text, conf) in enumerate(fills):
        eng.finish(k, text, conf)
    return (await task).to_json(), eng


async def test_an_added_parameter_is_filled_by_the_model_per_call() -> None:
    # the first call's fill is cut to one argument; the second's is below the threshold: the placeholder
    ans, eng = await added_parameter([("2.0, 1)", 0.8), ("1", 0.3)], threshold=0.5)
    first = eng.jobs[0].request
    assert isinstance(first, CompletionRequest)
    assert first.prefix.endswith("a = area(width, height, ") and first.suffix.startswith(")\n")
    assert "def area(w, h, scale)" in first.prefix and first.context == ()  # the definition is visible
    assert ans["kind"] == "param_added"
    assert [(s["newText"], s["confidence"], s["source"], s.get("placeholder")) for s in ans["suggestions"]] == [
        (", 2.0", 0.8, "model", None), (", scale", 0.0, "placeholder", {"start": 2, "end": 7})]


async def test_placeholders_off_leave_an_unfilled_site_out() -> None:
    ans, _ = await added_parameter([("2.0", 0.8), ("1", 0.3)], threshold=0.5, placeholders=False)
    assert [s["newText"] for s in ans["suggestions"]] == [", 2.0"]


async def test_a_fill_that_adds_a_parse_error_gives_way_to_the_placeholder() -> None:
    ans, _ = await added_parameter([("a b", 0.99), ("3", 0.99)], threshold=0.1)  # "a b" passes, does not parse
    assert [(s["line"], s["newText"], s["source"]) for s in ans["suggestions"]] == [
        (5, ", scale", "placeholder"), (6, ", 3", "model")]
    off, _ = await added_parameter([("a b", 0.99), ("1 +", 0.99)], threshold=0.1, placeholders=False)
    assert off["suggestions"] == []  # placeholders off: nothing to fall back to


async def test_a_newer_request_supersedes_and_an_edit_makes_stale() -> None:
    svc, store, eng = service()
    edit(svc, store, "def area(w, h)", "def area(w, h, scale)", 2)
    first = asyncio.ensure_future(svc.suggest(NextEditParams(URI, 2, 0, 20)))
    await until(lambda: len(eng.jobs) == 2)
    second = asyncio.ensure_future(svc.suggest(NextEditParams(URI, 2, 0, 20)))
    await until(lambda: len(eng.jobs) == 4)
    assert eng.jobs[0].cancelled and eng.jobs[0].cancel_reason == "superseded"
    eng.finish(0, "1", 1.0)
    eng.finish(1, "1", 1.0)
    assert (await first).to_json() == {"version": 2, "suggestions": [], "reason": "superseded"}
    svc.document_changed(URI)  # a didChange while the second runs
    eng.finish(2, "1", 1.0)
    eng.finish(3, "1", 1.0)
    assert (await second).reason == "document changed"


async def test_off_by_default_below_the_gate(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LLADA_MODEL", raising=False)  # the embedded tiny-code: gated on
    store = DocumentStore(1_000_000)
    store.open(URI, "python", 1, TEXT)
    assert NextEditService(store, ScriptedEngine(), parse_options({})[0], lambda: "utf-16").enabled  # tiny-code
    svc = NextEditService(store, ScriptedEngine(), parse_options({"model": "/models/other-7b"})[0], lambda: "utf-16")
    assert not svc.enabled
    assert "off" in (await svc.suggest(NextEditParams(URI, 1, 0, 0))).reason
    on = NextEditService(store, ScriptedEngine(), parse_options({"nextEdit": {"enabled": True}})[0],
                         lambda: "utf-16")
    assert on.enabled
    assert (await on.suggest(NextEditParams(URI, 1, 0, 0))).reason.startswith("no edit since")


async def test_the_gated_default_asks_no_fill_but_keeps_the_analysis(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LLADA_MODEL", raising=False)
    store = DocumentStore(1_000_000)
    store.open(URI, "python", 1, TEXT)
    eng = ScriptedEngine()
    svc = NextEditService(store, eng, parse_options({})[0], lambda: "utf-16")  # tiny-code: fills off
    edit(svc, store, "def area(w, h)", "def area(w, h, scale)", 2)
    ans = await svc.suggest(NextEditParams(URI, 2, 0, 20))
    assert ans.kind == "param_added" and eng.jobs == []  # no fill asked: each call gets the placeholder
    assert [(s["line"], s["newText"], s["source"], s["placeholder"]) for s in ans.suggestions] == [
        (5, ", scale", "placeholder", {"start": 2, "end": 7}), (6, ", scale", "placeholder", {"start": 2, "end": 7})]
    # the placeholders are pending follow-ups: the base stays until they are taken
    edit(svc, store, "area(width, height)", "area(width, height, 1.0)", 3)
    edit(svc, store, "area(2, 3)", "area(2, 3, 2.0)", 4)
    assert (await svc.suggest(NextEditParams(URI, 4, 6, 12))).suggestions == []
    edit(svc, store, "def main(width, height)", "def main(wide, height)", 5)
    ans = await svc.suggest(NextEditParams(URI, 5, 4, 12))
    assert ans.kind == "rename" and [s["newText"] for s in ans.suggestions] == ["wide"]


async def test_an_engine_that_cannot_fill_is_not_asked() -> None:
    """Fills on, but the engine advertises no next-edit fills (SGLang: no confidence to judge
    them by, `Capabilities.next_edit`): no job is submitted, each call gets its placeholder."""
    svc, store, eng = service()
    eng.info = {"backend": "sglang", "next_edit": False}
    assert svc.enabled and not svc.fills and svc.debug_info()["fills"] is False
    edit(svc, store, "def area(w, h)", "def area(w, h, scale)", 2)
    ans = await svc.suggest(NextEditParams(URI, 2, 0, 20))
    assert ans.kind == "param_added" and eng.jobs == []
    assert [(s["line"], s["source"]) for s in ans.suggestions] == [(5, "placeholder"), (6, "placeholder")]
    eng.info = {"backend": "native"}  # a native engine again: the fills go out
    assert svc.fills


async def test_next_edit_and_completion_refuse_with_the_one_check() -> None:
    """The position, language and document checks are the completion's own (`Document`'s
    `request_offset` and `refusal`): the same errors and reasons on both paths."""
    from llada_lsp.completion.completions import CompletionService
    from llada_lsp.text.positions import PositionError

    store = DocumentStore(len(TEXT) + 10)
    store.open(URI, "python", 1, TEXT)
    store.open("file:///big.py", "python", 1, "x = 1\n" * len(TEXT))
    store.open("file:///bin.py", "python", 1, "\x00\x01" * 20)
    options = parse_options({"nextEdit": {"enabled": True}, "languages": ["typescript"]})[0]
    nxt = NextEditService(store, ScriptedEngine(), options, lambda: "utf-16")
    done = CompletionService(store, ScriptedEngine(), options, lambda m, p: None, lambda: "utf-16")
    errors = []
    for ask in (lambda: nxt.suggest(NextEditParams(URI, None, 99, 0)), lambda: done.complete(URI, 99, 0)):
        with pytest.raises(PositionError) as caught:
            await ask()
        errors.append(str(caught.value))
    assert errors[0] == errors[1] and "past the end" in errors[0]
    await done.complete(URI, 0, 0)
    assert (await nxt.suggest(NextEditParams(URI, None, 0, 0))).reason == done.last_empty == "language disabled"
    on = parse_options({"nextEdit": {"enabled": True}})[0]
    nxt = NextEditService(store, ScriptedEngine(), on, lambda: "utf-16")
    done = CompletionService(store, ScriptedEngine(), on, lambda m, p: None, lambda: "utf-16")
    for uri, why in (("file:///big.py", "larger than max_file_bytes"), ("file:///bin.py", "binary")):
        await done.complete(uri, 0, 0)
        assert why in done.last_empty and (await nxt.suggest(NextEditParams(uri, None, 0, 0))).reason == done.last_empty
