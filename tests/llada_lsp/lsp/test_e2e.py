"""End to end over stdio: the real server, engine and model, a pytest-lsp client.

The model may be an early training snapshot: these tests assert structure and behaviour
(plan kinds, stop rules, parse validity, refinement order, cancellation, cache), not quality.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

import pytest
from lsprotocol import types as t
from pygls.exceptions import JsonRpcRequestCancelled

from llada_lsp.client import apply_lsp_edits
from llada_lsp.completion.line_rest import kept_rest, rest_of_line
from llada_lsp.text.syntax import adds_error
from tests.llada_lsp.lsp_helpers import (
    DATA,
    complete_after,
    completion_id,
    debug_info,
    final_refine,
    first_text,
    inline,
    item_texts,
    needs_model,
    open_doc,
    poll,
    position_of,
    session_fixture,
)

pytestmark = [pytest.mark.asyncio(loop_scope="module"), needs_model]

# Small budgets keep the run short on a loaded 2-core CPU.
INIT = {"maxTokens": {"line": 12, "statements": 16, "block": 24}}


client = session_fixture(INIT)


# (file, languageId, needle, expected kind): the cursor goes right after the needle
CASES = [
    ("shapes.py.txt", "python", "def scale(points: list[Point], factor: float) -> list[Point]:",
     "block"),
    ("shapes.py.txt", "python", "def centroid(points: list[Point]) -> Point:\n    ", "statements"),
    ("queue.ts", "typescript", "  size(): number {\n    ", "block"),
    ("queue.ts", "typescript", "    const task = this.tasks.shift();", "line"),
    ("stack.go", "go", "func (s *Stack) Len() int {\n\t", "block"),
    ("stack.go", "go", "\tv := s.items[len(s.items)-1]\n\ts.items = ", "line"),
    ("matrix.rs", "rust", "    pub fn transpose(&self) -> Matrix {\n        ", "block"),
    ("matrix.rs", "rust", "        let mut m = Matrix::new(n, n);", "line"),
]


async def test_progress_reported(client: Any) -> None:
    reports = client.progress_reports.get("llada-model-load", [])
    kinds = [getattr(r, "kind", None) for r in reports]
    assert kinds[0] == "begin" and kinds[-1] == "end"
    assert any(s["state"] == "ready" for s in client.statuses)


async def test_plan_kinds_stop_rules_and_parse_validity(client: Any) -> None:
    got: list[tuple[str, str, str]] = []
    for fname, lid, needle, kind in CASES:
        text = (DATA / fname).read_text()
        uri, res = await complete_after(client, needle, f"k{len(got)}-{fname}", fname, lid)
        info = await debug_info(client)
        assert info["lastPlan"]["uri"] == uri
        assert info["lastPlan"]["kind"] == kind, (fname, needle, info["lastPlan"])
        suggestion = first_text(res)
        got.append((fname, kind, suggestion))
        cid = completion_id(res)
        final = suggestion
        if cid is not None:
            final = (await final_refine(client, cid))["text"]
        i = text.index(needle) + len(needle)
        for s in {suggestion, final}:
            if kind == "line":
                assert "\n" not in s, (fname, s)  # the line stop rule
            if s and kind != "line":
                assert not adds_error(lid, None, text[:i], s, text[i:]), (fname, s)
    nonempty = [g for g in got if g[2]]
    assert len(nonempty) >= 2, got  # a weak snapshot still completes somewhere


async def test_refinements_apply_in_order(client: Any) -> None:
    found = None
    for j, needle in enumerate(["    for i in range(len(points)):\n        a = points[i]\n",
                                "    square = [Point(0, 0), Point(1, 0), Point(1, 1), "
                                "Point(0, 1)]\n    name = ", "        return math.",
                                "        b = ",
                                # an empty body line: a statement that parses (the guard withholds the rest)
                                "def centroid(points: list[Point]) -> Point:\n    "]):
        _, res = await complete_after(client, needle.rstrip("\n"), f"r{j}.py")
        if completion_id(res):
            found = (res, completion_id(res))
            break
    if found is None:
        pytest.skip("the model suggested nothing at any position")
    res, cid = found
    final = await final_refine(client, cid)
    mine = [r for r in client.refines if r["completionId"] == cid]
    steps = [r["step"] for r in mine]
    assert steps == sorted(steps) and mine[-1] is final
    assert sum(1 for r in mine if r["final"]) == 1
    current = first_text(res)
    for r in mine:
        current = apply_lsp_edits(current, r["edits"])
        assert current == r["text"]
    assert current == final["text"]
    stats = await poll(lambda: next((s for s in client.stats if s["completionId"] == cid), None))
    for key in ("queueMs", "forwards", "tpf", "cacheHit", "totalMs", "overheadMs"):
        assert key in stats


async def test_rapid_requests_newest_wins(client: Any) -> None:
    text = (DATA / "stack.go").read_text()
    uri = open_doc(client, "stack.go", "go", uri=(DATA / "rapid.go").as_uri())
    info0 = await poll(_idle(client), 60)  # no earlier test's job still in the engine
    before = info0["engine"]
    needles = ["\tv := s.items[len(s.items)-1]", "\ts.items = append(s.items, v)",
               "\treturn v, nil", "\t\treturn 0, errors.New(\"empty stack\")"]
    results = await asyncio.gather(*(inline(client, uri, position_of(text, n))
                                     for n in needles))
    info1 = await debug_info(client)
    after = info1["engine"]
    assert after["max_running_per_doc"] == 1
    # one job per request, and one more if the newest came out empty and was rescued
    rescues = info1["counters"].get("empty_rescues", 0) - info0["counters"].get("empty_rescues", 0)
    assert after["submitted"] - before["submitted"] == 4 + rescues and rescues <= 1
    # the three older requests were skipped while queued or cancelled between forwards; at
    # most the newest's job (and its rescue's) ran to the end (on a loaded machine an older
    # request's job may end first and its rescue be the one stopped)
    stopped = (after["skipped"] - before["skipped"]) + (after["cancelled"] - before["cancelled"])
    ran = after["submitted"] - before["submitted"] - stopped
    assert stopped >= 3 and ran <= 1 + rescues, (before, after)
    assert all(not first_text(r) for r in results[:3])  # superseded: empty, not errors
    info = await poll(_idle(client), 60)
    assert info["running"] == 0


def _idle(client: Any) -> Any:
    async def check() -> Any:
        info = await debug_info(client)
        return info if info["running"] == 0 and info["refining"] == 0 else None
    return check


async def _suggested(client: Any, uri: str, least: int, none: str,
                     spots: Iterable[tuple[str, t.Position]]) -> tuple[int, t.Position, str, str, dict[str, Any]]:
    """The first of `spots` (the document's text, the cursor) where the model suggests at least
    `least` characters (the test is skipped with `none` if it does nowhere): its index, the
    cursor, the completion id, its final text, and llada/debugInfo once the server is idle."""
    for k, (text, pos) in enumerate(spots):
        open_doc(client, "shapes.py.txt", "python", uri=uri, text=text)
        res = await inline(client, uri, pos)
        if len(first_text(res).strip()) >= least:
            cid = completion_id(res)
            assert cid is not None
            final = (await final_refine(client, cid))["text"]
            await poll(_idle(client), 60)
            return k, pos, cid, final, await debug_info(client)
    pytest.skip(none)


async def test_cancel_request_gets_request_cancelled(client: Any) -> None:
    text = "// cancel test: not in the cache\n" + (DATA / "matrix.rs").read_text()
    uri = open_doc(client, "matrix.rs", "rust", text=text, uri=(DATA / "cancel.rs").as_uri())
    await poll(_idle(client), 60)
    before = (await debug_info(client))["engine"]
    params = t.InlineCompletionParams(
        text_document=t.TextDocumentIdentifier(uri),
        position=position_of(text, "pub fn transpose(&self) -> Matrix {\n        "),
        context=t.InlineCompletionContext(t.InlineCompletionTriggerKind.Automatic))
    fut = asyncio.ensure_future(client.protocol.send_request_async(
        t.TEXT_DOCUMENT_INLINE_COMPLETION, params, msg_id="cancel-me"))

    async def started() -> bool:
        return (await debug_info(client))["engine"]["engine_calls"] > before["engine_calls"]

    await poll(started, 30)
    client.protocol.notify(t.CANCEL_REQUEST, t.CancelParams(id="cancel-me"))
    with pytest.raises(JsonRpcRequestCancelled):
        await fut
    info = await poll(_idle(client), 30)
    assert info["engine"]["cancelled"] > before["cancelled"]


async def test_type_through_and_cache_serve_without_engine(client: Any) -> None:
    text = (DATA / "shapes.py.txt").read_text()
    uri = (DATA / "typethrough.py").as_uri()
    # the spot this test needs is any suggestion of 2+ characters; a small model has little
    # to add mid-line, so each indented line in turn has its code blanked out, the cursor
    # after its indentation (the single-line infill of the decode benchmark)
    lines = text.split("\n")
    spots = [(k, len(ln) - len(ln.lstrip())) for k, ln in enumerate(lines) if ln.strip() and ln != ln.lstrip()]
    _, pos, cid, final, before = await _suggested(
        client, uri, 2, "the model suggested nothing to type through",
        (("\n".join(lines[:k] + [lines[k][:ind]] + lines[k + 1:]), t.Position(k, ind)) for k, ind in spots))
    # type the first character of the (refined) suggestion
    ch = final[0]
    client.text_document_did_change(t.DidChangeTextDocumentParams(
        t.VersionedTextDocumentIdentifier(version=2, uri=uri),
        [t.TextDocumentContentChangePartial(range=t.Range(pos, pos), text=ch)]))
    res = await inline(client, uri, t.Position(pos.line, pos.character + 1))
    assert first_text(res) == final[1:]
    # undo it: the same prefix and suffix again is a cache hit
    client.text_document_did_change(t.DidChangeTextDocumentParams(
        t.VersionedTextDocumentIdentifier(version=3, uri=uri),
        [t.TextDocumentContentChangePartial(
            range=t.Range(pos, t.Position(pos.line, pos.character + 1)), text="")]))
    res2 = await inline(client, uri, pos)
    assert first_text(res2) == final
    # and textDocument/completion offers the same text first (then any other candidates
    # the cache holds for this place: an empty answer rescued by candidates has some)
    comp = await client.text_document_completion_async(t.CompletionParams(
        text_document=t.TextDocumentIdentifier(uri), position=pos))
    assert isinstance(comp, t.CompletionList) and len(comp.items) >= 1
    assert comp.items[0].text_edit is not None and comp.items[0].text_edit.new_text == final
    news = [it.text_edit.new_text for it in comp.items if it.text_edit is not None]
    assert len(set(news)) == len(news) == len(comp.items)
    after = await debug_info(client)
    assert after["engine"]["submitted"] == before["engine"]["submitted"]
    assert after["counters"].get("type_through", 0) == before["counters"].get("type_through",
                                                                              0) + 1
    assert after["counters"].get("cache", 0) >= before["counters"].get("cache", 0) + 2
    # accept and show notifications are taken
    await client.workspace_execute_command_async(t.ExecuteCommandParams(
        command="llada.acceptCompletion", arguments=[cid]))
    client.protocol.notify("textDocument/didShowCompletion", {"item": {"insertText": final}})
    client.protocol.notify("textDocument/didPartiallyAcceptCompletion",
                           {"item": {"insertText": final}, "acceptedLength": 1})
    counters = (await poll(_counter(client, "partially_accepted")))["counters"]
    assert counters["accepted"] == 1 and counters["shown"] == 1


def _counter(client: Any, name: str) -> Any:
    async def check() -> Any:
        info = await debug_info(client)
        return info if info["counters"].get(name) else None
    return check


async def test_document_changed_while_drafting_gives_empty(client: Any) -> None:
    text = "// stale test: not in the cache\n" + (DATA / "queue.ts").read_text()
    uri = open_doc(client, "queue.ts", "typescript", text=text,
                   uri=(DATA / "stale.ts").as_uri())
    await poll(_idle(client), 60)
    pos = position_of(text, "  size(): number {\n    ")
    before = (await debug_info(client))["engine"]["engine_calls"]
    task = asyncio.ensure_future(inline(client, uri, pos))

    async def started() -> bool:
        return (await debug_info(client))["engine"]["engine_calls"] > before

    await poll(started, 30)
    client.text_document_did_change(t.DidChangeTextDocumentParams(
        t.VersionedTextDocumentIdentifier(version=2, uri=uri),
        [t.TextDocumentContentChangePartial(range=t.Range(t.Position(0, 0), t.Position(0, 0)),
                                            text="// edited\n")]))
    res = await task
    assert not first_text(res)


async def test_accept_then_next_request_is_served_from_the_speculation(client: Any) -> None:
    text = (DATA / "shapes.py.txt").read_text()
    uri = (DATA / "speculate.py").as_uri()
    needles = ["        return math.", "        b = ", "    name = ", "        total += ",
               "def centroid(points: list[Point]) -> Point:\n    "]  # an empty body line: one that parses
    k, pos, cid, final, before = await _suggested(client, uri, 1, "the model suggested nothing to accept",
                                                  ((text, position_of(text, n)) for n in needles))
    needle = needles[k]
    # the editor replaces the item's range (the cursor to the end of the line when code
    # follows, docs/lsp.md) with the suggestion (didChange), then runs the item's command
    i = text.index(needle) + len(needle)
    rest = rest_of_line(text, i)
    cut = next(k for k in range(len(final) + 1) if final[k:] == kept_rest(final[:k], rest)) \
        if rest else len(final)  # the suggestion's own text, before the kept rest of the line
    end = t.Position(pos.line, pos.character + len(rest))
    client.text_document_did_change(t.DidChangeTextDocumentParams(
        t.VersionedTextDocumentIdentifier(version=2, uri=uri),
        [t.TextDocumentContentChangePartial(range=t.Range(pos, end), text=final)]))
    await client.workspace_execute_command_async(t.ExecuteCommandParams(
        command="llada.acceptCompletion", arguments=[cid]))

    def grew(info: dict[str, Any], name: str) -> int:
        return info["counters"].get(name, 0) - before["counters"].get(name, 0)

    async def speculated() -> Any:
        info = await debug_info(client)
        started = grew(info, "speculated") + grew(info, "speculation_skipped")
        return info if started and info["speculating"] == 0 and info["running"] == 0 else None

    mid = await poll(speculated, 60)
    new_text = text[:i] + final + text[i + len(rest):]
    i += cut
    line = new_text.count("\n", 0, i)
    res = await inline(client, uri, t.Position(line, i - (new_text.rfind("\n", 0, i) + 1)))
    after = await debug_info(client)
    assert after["engine"]["submitted"] == mid["engine"]["submitted"]  # no engine call
    if grew(mid, "speculation_skipped"):  # nothing to ask at the new cursor: nor now
        assert after["lastPlan"]["kind"] == "none"
        return
    # the speculation, and its rescue if it came out empty
    assert mid["engine"]["submitted"] == before["engine"]["submitted"] + 1 + grew(mid, "empty_rescues")
    assert after["cache"]["hits"] == mid["cache"]["hits"] + 1
    if first_text(res):
        stats = await poll(lambda: next((s for s in client.stats
                                         if s["completionId"] == completion_id(res)), None))
        assert stats["cacheHit"] and stats["forwards"] == 0


async def test_invoked_request_offers_every_fitting_candidate(client: Any) -> None:
    """An Invoked request (the user asked, e.g. to cycle) in speedy mode makes the engine
    decode candidates, waits for them and answers each one that fits, distinct, primary's
    rank first; an Automatic request at the same place then gets them from the cache."""
    lines = (DATA / "shapes.py.txt").read_text().split("\n")
    several = 0
    # each indented line in turn has its code blanked out, the cursor after its indentation
    for k in [k for k, ln in enumerate(lines) if ln.strip() and ln != ln.lstrip()][4:12]:
        ind = len(lines[k]) - len(lines[k].lstrip())
        before, after = "\n".join(lines[:k] + [lines[k][:ind]]), "\n" + "\n".join(lines[k + 1:])
        uri = open_doc(client, "shapes.py.txt", "python", uri=(DATA / f"inv{k}.py").as_uri(),
                       text=before + after)
        pos = t.Position(k, ind)
        res = await inline(client, uri, pos, invoked=True)
        texts = item_texts(res)
        if not texts:
            continue
        assert res is not None and len(set(texts)) == len(texts)
        assert [it.command.arguments[1] for it in res.items if it.command] == list(range(len(texts)))
        for s in texts[1:]:  # the others all fit (the first may be the primary, trimmed)
            assert s.strip() and not adds_error("python", None, before, s, after), s
        cid = completion_id(res)
        assert cid is not None
        stats = await poll(lambda c=cid: next((s for s in client.stats if s["completionId"] == c), None), 60)
        assert stats["groupForwards"] >= stats["forwards"]
        final = await final_refine(client, cid)
        assert final["text"] == texts[0] and final["edits"] == []  # answered when done
        again = await inline(client, uri, pos)
        assert item_texts(again) == texts
        several += len(texts) > 1
        if several >= 2:
            break
    assert several, "no position got more than one candidate"
