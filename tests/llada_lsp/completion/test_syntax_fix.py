"""Syntax-guided edit, speculation and engine wiring without a model: span mapping, the
remask loop of the completion service against a scripted engine, accept matching."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from lsprotocol import types as t

from engine.api import CompletionRequest, EngineEvent, alternatives_for
from llada_lsp.completion.cache import remember
from llada_lsp.completion.completions import CompletionService
from llada_lsp.completion.postprocess import raw_spans, remask_can_help
from llada_lsp.completion.speculation import Accept
from llada_lsp.engines.engine_client import (
    EngineClient,
    EngineJob,
    InProcessEngine,
    Progress,
    make_engine,
)
from llada_lsp.engines.ws_engine import WsEngineClient
from llada_lsp.options import Options, OptionsError, parse_options
from llada_lsp.text.documents import DocumentStore
from llada_lsp.text.syntax import error_spans

BEFORE = "def area(w, h):\n"
AFTER = "\n\n\ndef perimeter(w, h):\n    return 2 * (w + h)\n"


def test_error_spans_clip_to_the_middle() -> None:
    middle = "    x = w * h = :\n    return x"
    spans = error_spans("python", None, BEFORE, middle, AFTER)
    assert [middle[s:e] for s, e in spans] == ["x = w * h = :"]
    assert error_spans("python", None, BEFORE, "    return w * h", AFTER) == []
    assert error_spans("plaintext", None, BEFORE, "    return (", AFTER) == []


def test_error_spans_unclosed_bracket_blames_the_middle() -> None:
    middle = "    if w:\n        return (w"
    spans = error_spans("python", None, BEFORE, middle, AFTER)
    assert spans and all(0 <= s < e <= len(middle) for s, e in spans)
    assert any("(w" in middle[s:e] for s, e in spans)


def test_error_spans_non_ascii_offsets_are_characters() -> None:
    middle = "    s = 'é😀' + = 2"
    spans = error_spans("python", None, BEFORE, middle, AFTER)
    assert [middle[s:e] for s, e in spans] == ["="]


def test_raw_spans_undo_cleaning() -> None:
    raw = "   x = 1  \r\n    y = = 2   \n\n"
    cleaned = "x = 1\n    y = = 2"
    s = cleaned.index("y")
    assert [raw[a:b] for a, b in raw_spans(raw, cleaned, [(s, len(cleaned))])] == ["y = = 2"]
    assert raw_spans(raw, cleaned, [(0, 1)]) == [(3, 4)]
    assert raw_spans("abc", "abc", [(5, 9)]) == []


class Scripted(EngineClient):
    """An engine whose completions and remasks return scripted texts."""

    def __init__(self, complete_text: str, remask_texts: list[str], alternatives: tuple[str, ...] = (),
                 only_when_asked: bool = False) -> None:
        super().__init__()
        self.state = "ready"
        self.complete_text, self.remask_texts = complete_text, list(remask_texts)
        self.alternatives = alternatives
        self.only_when_asked = only_when_asked  # alternatives only for plans that ask for them
        self.remasks: list[list[tuple[int, int]]] = []
        self.requests: list[CompletionRequest] = []

    async def start(self, progress: Progress) -> None:
        return None

    def _job(self, request: CompletionRequest, text: str, alternatives: tuple[str, ...] = ()) -> EngineJob:
        job = EngineJob(request, asyncio.get_running_loop())
        self.counters["submitted"] += 1
        job.push(EngineEvent("draft", request.request_id, text, step=1, draft_complete=True))
        job.push(EngineEvent("done", request.request_id, text, step=2, draft_complete=True, reason="stop_rule",
                             stats={"forwards": 2}, alternatives=alternatives))
        job.finished = True
        return job

    def submit(self, request: CompletionRequest) -> EngineJob:
        self.requests.append(request)
        asked = alternatives_for(request.plan, "speedy") > 1
        return self._job(request, self.complete_text,
                         self.alternatives if asked or not self.only_when_asked else ())

    def remask(self, job: EngineJob, spans: list[tuple[int, int]]) -> EngineJob | None:
        self.remasks.append(spans)
        if not self.remask_texts:
            return None
        return self._job(job.request, self.remask_texts.pop(0))

    async def close(self) -> None:
        return None


def _service(engine: EngineClient, text: str, **opts: Any) -> tuple[CompletionService, list[Any]]:
    sent: list[Any] = []
    store = DocumentStore()
    store.open("file:///a.py", "python", 1, text)
    options, _ = parse_options(opts)
    svc = CompletionService(store, engine, options, lambda m, p: sent.append((m, p)),
                            lambda: "utf-16")
    return svc, sent


def _run(coro_fn: Callable[[], Any]) -> Any:
    return asyncio.run(coro_fn())


@pytest.mark.parametrize(("remask_texts", "expected", "fixed"), [
    (["    return w * h"], "    return w * h", True),  # the first remask fixes it
    (["    x = w * h = :\n    y = 1", "    x = w * h\n    return x"], "    x = w * h\n    return x", True),
    (["    x = = 1", "    x = = 2"], "", False),  # still broken after 2 passes: trimmed away
])
def test_remask_before_showing(remask_texts: list[str], expected: str, fixed: bool) -> None:
    engine = Scripted("    x = w * h = :\n    return x", remask_texts)
    svc, _ = _service(engine, BEFORE + "    " + AFTER, syntaxRemaskPasses=2)
    answer = _run(lambda: svc.complete("file:///a.py", 1, 4))  # after the indentation
    assert (answer.text if answer else "") == expected.lstrip()
    assert engine.remasks[0] == [(4, 17)]  # raw text: "    " was stripped before checking
    assert svc.counters["syntax_remasks"] == min(2, len(engine.remasks))
    assert bool(svc.counters["syntax_fixed"]) == fixed


def test_no_remask_when_it_cannot_change_the_text() -> None:
    # the error covers every character: a remask would be a fresh decode of the same prompt
    engine = Scripted("    x = = :", ["    x = 1"])
    svc, _ = _service(engine, BEFORE + "    " + AFTER, syntaxRemaskPasses=2, rescueAlternatives=0)
    answer = _run(lambda: svc.complete("file:///a.py", 1, 4))
    assert answer is None and engine.remasks == [] and svc.counters["syntax_unfixed"] == 1
    # a remask that changed nothing is not repeated
    engine = Scripted("    y = w * h\n    x = = :", ["    y = w * h\n    x = = :", "    y = w * h"])
    svc, _ = _service(engine, BEFORE + "    " + AFTER, syntaxRemaskPasses=2, rescueAlternatives=0)
    answer = _run(lambda: svc.complete("file:///a.py", 1, 4))
    assert answer is not None and answer.text == "y = w * h"
    assert len(engine.remasks) == 1 and svc.counters["syntax_trimmed"] == 1


def test_remask_can_help() -> None:
    assert remask_can_help("x = = 1\ny = 2", [(0, 7)])
    assert not remask_can_help("x = = 1", [(0, 7)])
    assert not remask_can_help("x = = 1\n  ", [(0, 4), (4, 7)])  # blanks left over do not count
    assert not remask_can_help("x = = 1\ny = 2", [(0, 7)], previous="x = = 1\ny = 2")
    assert remask_can_help("x = = 1\ny = 2", [(0, 7)], previous="x = = 3\ny = 2")
    assert remask_can_help("abc", [(5, 9)])  # spans outside the text cover nothing


def test_no_remask_when_disabled_trims_instead() -> None:
    engine = Scripted("    y = w * h\n    x = = :", [])
    svc, _ = _service(engine, BEFORE + "    " + AFTER, syntaxRemaskPasses=0, rescueAlternatives=0)
    answer = _run(lambda: svc.complete("file:///a.py", 1, 4))
    assert answer is not None and answer.text == "y = w * h"
    assert engine.remasks == [] and svc.counters["syntax_trimmed"] == 1


def test_accept_matches_either_text() -> None:
    doc = "a = 1\nb = \nc = 3\n"
    anchor = doc.index("b = ") + 4
    shown = remember("7", doc, anchor, "2 + 2", "line")
    shown.text = "2 + 3"  # refined after it was first shown
    acc = Accept.of("u", shown, "2 + 2")
    assert acc.cursor_after(doc[:anchor] + "2 + 3" + doc[anchor:]) == anchor + 5
    assert acc.cursor_after(doc[:anchor] + "2 + 2" + doc[anchor:]) == anchor + 5
    assert acc.cursor_after(doc[:anchor] + "2 + 4" + doc[anchor:]) is None
    assert acc.cursor_after(doc) is None


def test_make_engine_locations() -> None:
    assert isinstance(make_engine("inprocess", model_dir=None, mode="speedy", device="cpu"),
                      InProcessEngine)
    auto = make_engine("auto", model_dir="/m", mode="quality", device="cpu")
    assert isinstance(auto, WsEngineClient) and auto.url is None and auto.model == "/m"
    ws = make_engine("ws://10.0.0.2:9000", model_dir=None, mode="speedy", device="cpu",
                     token="s3cret")
    assert isinstance(ws, WsEngineClient) and ws.url == "ws://10.0.0.2:9000"
    assert ws.token == "s3cret"
    with pytest.raises(ValueError, match="unknown engine location"):
        make_engine("tcp://x", model_dir=None, mode="speedy", device="cpu")
    opts, _ = parse_options({"engine": "auto", "engineToken": "s3cret"})
    assert opts.to_json()["engine_token"] == "***"
    assert Options().speculative is True


@pytest.mark.parametrize(("alternatives", "expected", "remasked"), [
    # the first alternative that adds no parse error is shown, with no remask
    (("    return = w", "    return w * h", "    return h"), "return w * h", False),
    # none fits: the primary goes through the remask loop as before
    (("    return = w", "    x = ) :"), "return w + h", True),
    # an empty primary: the first alternative that fits
    (("    return w - h",), "return w - h", False),
])
def test_alternatives_first_fitting_candidate_is_shown(alternatives: tuple[str, ...], expected: str,
                                                        remasked: bool) -> None:
    primary = "" if len(alternatives) == 1 else "    x = w * h = :\n    return x"
    engine = Scripted(primary, ["    return w + h"], alternatives)
    svc, _ = _service(engine, BEFORE + "    " + AFTER, syntaxRemaskPasses=2)
    answer = _run(lambda: svc.complete("file:///a.py", 1, 4))
    assert answer is not None and answer.text == expected
    assert bool(engine.remasks) == remasked
    assert svc.counters["alternative_shown"] == (0 if remasked else 1)


@pytest.mark.parametrize("alternatives", [1, 4])
def test_a_broken_line_waits_for_the_alternatives(alternatives: int) -> None:
    """A line is checked as every suggestion is (the guard, issue 51): a first draft that adds
    a parse error waits for the candidates and the answer is the first that fits; the broken
    line is never shown."""
    engine = Scripted("w * (h", [], ("w + = h", "w * h", "h * w"))
    svc, sent = _service(engine, BEFORE + "    return " + AFTER, alternatives=alternatives)
    answer = _run(lambda: svc.complete("file:///a.py", 1, 11))
    assert answer is not None and svc.last_plan["kind"] == "line"
    assert answer.text == "w * h"
    assert svc.counters["alternative_shown"] == 1


def test_invoked_request_answers_every_fitting_candidate() -> None:
    """An explicit (Invoked) request asks the engine for candidates, waits for them and answers
    each one that fits, distinct, in rank order; the cache keeps them for later requests. An
    automatic request in speedy mode decodes one candidate, as before."""
    engine = Scripted("w * (h", [], ("w + = h", "w * h", "h * w", "w * h"), only_when_asked=True)
    svc, _ = _service(engine, BEFORE + "    return " + AFTER, mode="speedy", invokedAlternatives=3,
                      rescueAlternatives=0)
    first = _run(lambda: svc.complete("file:///a.py", 1, 11))
    assert first is None  # its one candidate adds a parse error (no rescue here)
    assert engine.requests[0].plan.alternatives == 1  # the mode's default, sent explicit
    invoked = _run(lambda: svc.complete("file:///a.py", 1, 11, invoked=True))
    assert invoked is not None and invoked.source == "engine"
    assert engine.requests[1].plan.alternatives == 3
    # the unclosed primary and "w + = h" add parse errors; the repeated "w * h" is dropped
    assert (invoked.text, invoked.others) == ("w * h", ("h * w",))
    assert svc.counters["invoked"] == 1
    # both kinds of request are now served from the cache, with the candidates
    again = _run(lambda: svc.complete("file:///a.py", 1, 11))
    again_invoked = _run(lambda: svc.complete("file:///a.py", 1, 11, invoked=True))
    for a in (again, again_invoked):
        assert a is not None and a.source == "cache" and (a.text, a.others) == ("w * h", ("h * w",))
    assert len(engine.requests) == 2
    # accepting the second candidate arms speculation on its text
    svc.accepted(again.completion_id, 1)
    assert svc.counters["accepted_other_candidate"] == 1
    assert svc.speculator.pending["file:///a.py"].texts == ("w * h", "h * w")


def test_invoked_request_in_quality_mode_uses_the_modes_candidates() -> None:
    """Quality mode decodes four candidates already: an invoked request keeps its plan and
    waits for the done event instead of answering on the first draft."""
    engine = Scripted("w * h", [], ("h * w", "w * h + 1"))
    svc, _ = _service(engine, BEFORE + "    return " + AFTER, mode="quality")
    automatic = _run(lambda: svc.complete("file:///a.py", 1, 11))
    assert automatic is not None and (automatic.text, automatic.others) == ("w * h", ())  # first draft
    svc.cache = type(svc.cache)(8)  # forget it: the next request reaches the engine
    invoked = _run(lambda: svc.complete("file:///a.py", 1, 11, invoked=True))
    assert invoked is not None and (invoked.text, invoked.others) == ("w * h", ("h * w", "w * h + 1"))
    assert [r.plan.alternatives for r in engine.requests] == [4, 4]  # quality's, explicit
    assert svc.counters["invoked"] == 0


def test_invoked_alternatives_option_is_validated() -> None:
    assert parse_options({"invokedAlternatives": 0})[0].invoked_alternatives == 0
    with pytest.raises(OptionsError, match="invokedAlternatives"):
        parse_options({"invokedAlternatives": -1})
    assert parse_options({"invokedAlternatives": 9})[0].invoked_alternatives == 8  # clamped (issue 41)


@pytest.mark.parametrize("rescue", [0, 4])
def test_an_empty_answer_is_rescued_by_candidates(rescue: int) -> None:
    """Speedy mode decodes one candidate; when it comes out empty (here: nothing that parses
    is left after trimming), the server decodes `rescueAlternatives` candidates and shows the
    first that fits. Off (0): no suggestion, as before."""
    engine = Scripted("    x = = :", [], ("    return = w", "    return w * h", "    return h"),
                      only_when_asked=True)
    svc, sent = _service(engine, BEFORE + "    " + AFTER, mode="speedy", rescueAlternatives=rescue)
    answer = _run(lambda: svc.complete("file:///a.py", 1, 4))
    stats = [p for m, p in sent if m == "llada/stats"]
    if rescue:
        assert answer is not None and (answer.text, answer.others) == ("return w * h", ("return h",))
        assert [r.plan.alternatives for r in engine.requests] == [1, 4]
        assert (svc.counters["empty_rescues"], svc.counters["empty_rescued"]) == (1, 1)
        assert all(p["shown"] for p in stats), stats
    else:
        assert answer is None and len(engine.requests) == 1 and svc.counters["empty_rescues"] == 0
        # the stats say nothing was shown, and why: the editors keep the last suggestion's
        # latency and show the reason in the status item's tooltip / :checkhealth
        assert [p["shown"] for p in stats] == [False], stats
        assert stats[0]["emptyReason"] == svc.last_empty.split("(", 1)[1].rstrip(")"), (stats, svc.last_empty)
        assert stats[0]["emptyReason"] in ("adds a parse error", "trimmed to parse", "nothing left"), stats


def test_a_speculation_that_comes_out_empty_is_rescued_too() -> None:
    """After an accept, the speculated completion at the new cursor goes through the same
    rescue as a request: the cache then holds the candidate that fits, and the next request
    there is served from it."""
    engine = Scripted("", [], ("    return = w", "    return w * h", "    return h"), only_when_asked=True)
    svc, _ = _service(engine, BEFORE + "    " + AFTER, mode="speedy")

    async def scenario() -> Any:
        # a suggestion was shown at the end of line 1 and accepted: "x = 1" is inserted
        doc = svc.store.get("file:///a.py")
        offset = doc.offset_at(1, 4, "utf-16")
        svc._show("file:///a.py", "7", doc.text, offset, "x = 1\n    ", "statements")
        svc.accepted("7")
        svc.store.change("file:///a.py", 2, [t.TextDocumentContentChangePartial(
            range=t.Range(t.Position(1, 4), t.Position(1, 4)), text="x = 1\n    ")], "utf-16")
        svc.document_changed("file:///a.py")
        await asyncio.gather(*svc.speculator.tasks)
        return await svc.complete("file:///a.py", 2, 4)

    answer = _run(scenario)
    assert [r.plan.alternatives for r in engine.requests] == [1, 4]  # speculation, then its rescue
    assert svc.counters["speculation_done"] == 1 and svc.counters["empty_rescued"] == 1
    assert answer is not None and answer.source == "cache"
    assert (answer.text, answer.others) == ("return w * h", ("return h",))


def test_the_recipe_ends_early_with_its_reason() -> None:
    """`complete`'s steps end a request with a verdict: no suggestion, no engine job, and the
    reason counted (llada/debugInfo's emptyReasons); once the engine is ready, an answer."""
    engine = Scripted("th = w * h", [])
    text = BEFORE + "    " + AFTER
    off, _ = _service(engine, text, languages=["go"])
    assert _run(lambda: off.complete("file:///a.py", 1, 4)) is None
    assert dict(off.empty_reasons) == {"language disabled": 1} and off.last_plan == {}  # before the plan
    svc, _ = _service(engine, text.replace("    \n", "    wid\n"))
    assert _run(lambda: svc.complete("file:///a.py", 1, 5)) is None  # inside an identifier
    engine.state = "loading"
    assert _run(lambda: svc.complete("file:///a.py", 1, 7)) is None
    assert engine.requests == [] and svc.counters["empty"] == 2
    assert dict(svc.empty_reasons) == {"inside an identifier": 1, "engine loading": 1}
    assert svc.last_empty == "engine loading" and svc.last_plan["kind"] != "none"
    engine.state = "ready"
    answer = _run(lambda: svc.complete("file:///a.py", 1, 7))
    assert answer is not None and answer.source == "engine" and len(engine.requests) == 1
    assert svc.counters["empty"] == 2 and svc.counters["answered"] == 1
