"""LSP 3.18 `selectedCompletionInfo`, end to end over stdio (real server, engine and model).

While the editor's completion widget shows a selected item, an inline completion is only
shown if it extends that item's text and replaces the same range. The server plans it on
the document as it would be with the item accepted: the same prompt, the same cache entry.
"""

from __future__ import annotations

from typing import Any

import pytest
from lsprotocol import types as t
from pygls.exceptions import JsonRpcInvalidParams

from llada_lsp.client import apply_lsp_edits, completion_id, debug_info, inline, item_texts
from tests.llada_lsp.lsp_helpers import (
    DATA,
    final_refine,
    needs_model,
    open_doc,
    poll,
    session_fixture,
)

pytestmark = [pytest.mark.asyncio(loop_scope="module"), needs_model]

INIT = {"maxTokens": {"line": 12, "statements": 16, "block": 24}}


client = session_fixture(INIT)


def _cid(res: t.InlineCompletionList | None) -> str:
    cid = completion_id(res)
    assert cid is not None
    return cid


def _spots(tag: str) -> list[tuple[list[str], int, int, str]]:
    """(lines, line, indent, word) for each indented line that starts with a word of 4+
    letters; its rest is blanked out. The first line is `tag`: each test gets its own
    prompts (and so its own cache entries)."""
    lines = [f"# {tag}", *(DATA / "shapes.py.txt").read_text().split("\n")]
    out = []
    for k, ln in enumerate(lines):
        body = ln.lstrip()
        word = body.split(" ", 1)[0].split("(", 1)[0]
        if ln != body and len(word) >= 4 and word.isidentifier():
            out.append((lines, k, len(ln) - len(body), word))
    return out


def _with_line(lines: list[str], k: int, new: str) -> str:
    return "\n".join(lines[:k] + [new] + lines[k + 1:])


async def _ask_with_word_selected(client: Any, name: str, lines: list[str], k: int, ind: int,
                                  word: str) -> tuple[str, t.Range, t.InlineCompletionList | None]:
    """Open a document with the first two letters of `word` typed at line k (as document
    `name`) and ask there with the widget's item `word` selected over them."""
    uri = open_doc(client, "shapes.py.txt", "python", uri=(DATA / f"{name}.py").as_uri(),
                   text=_with_line(lines, k, lines[k][:ind] + word[:2]))
    rng = t.Range(t.Position(k, ind), t.Position(k, ind + 2))
    res = await inline(client, uri, t.Position(k, ind + 2),
                       selected=t.SelectedCompletionInfo(range=rng, text=word))
    return uri, rng, res


async def test_a_selected_item_is_planned_as_if_accepted(client: Any) -> None:
    """The completion after the typed word, then the same place with only two letters typed
    and the word selected in the widget: served from the cache entry of the first (the
    prompt is the same), with the word in front and the widget item's range."""
    checked = 0
    for lines, k, ind, word in _spots("selected item: as if accepted"):
        uri = open_doc(client, "shapes.py.txt", "python", uri=(DATA / f"sel-a{k}.py").as_uri(),
                       text=_with_line(lines, k, lines[k][:ind] + word))
        res = await inline(client, uri, t.Position(k, ind + len(word)))
        if not item_texts(res):
            continue
        final = (await final_refine(client, _cid(res)))["text"]
        before = await debug_info(client)
        _, rng, got = await _ask_with_word_selected(client, f"sel-b{k}", lines, k, ind, word)
        after = await debug_info(client)
        assert item_texts(got)[0] == word + final
        assert got is not None and all(it.range == rng for it in got.items)
        assert all(x.startswith(word) for x in item_texts(got))
        assert after["engine"]["submitted"] == before["engine"]["submitted"]
        assert after["counters"]["cache"] == before["counters"].get("cache", 0) + 1
        assert after["counters"]["selected_item"] == before["counters"].get("selected_item", 0) + 1
        checked += 1
        if checked == 2:
            break
    assert checked, "the model suggested nothing after any word"


async def test_a_selected_item_then_accepting_it(client: Any) -> None:
    """Through the engine: every item and refinement extends the selected word; once the
    user accepts the widget item, the next request continues it without the engine."""
    for lines, k, ind, word in _spots("selected item: through the engine"):
        uri, rng, res = await _ask_with_word_selected(client, f"sel-c{k}", lines, k, ind, word)
        texts = item_texts(res)
        if not texts:
            continue
        assert res is not None and all(it.range == rng for it in res.items)
        assert all(x.startswith(word) and len(x) > len(word) for x in texts)
        cid = _cid(res)
        final = await final_refine(client, cid)
        current = texts[0]
        for r in [r for r in client.refines if r["completionId"] == cid]:
            assert r["text"].startswith(word)
            current = apply_lsp_edits(current, r["edits"])
            assert current == r["text"]
        assert current == final["text"]
        # the user accepts the widget's item: the document now holds the word
        client.text_document_did_change(t.DidChangeTextDocumentParams(
            t.VersionedTextDocumentIdentifier(version=2, uri=uri),
            [t.TextDocumentContentChangePartial(range=rng, text=word)]))
        before = await debug_info(client)
        nxt = await inline(client, uri, t.Position(k, ind + len(word)))
        after = await debug_info(client)
        assert item_texts(nxt)[0] == final["text"][len(word):]
        assert after["engine"]["submitted"] == before["engine"]["submitted"]
        return
    pytest.fail("the model suggested nothing after any selected word")


async def test_a_bad_selected_range_is_a_clear_error(client: Any) -> None:
    lines, k, ind, word = _spots("selected item: bad ranges")[0]
    uri = open_doc(client, "shapes.py.txt", "python", uri=(DATA / "sel-bad.py").as_uri(),
                   text="\n".join(lines))
    pos = t.Position(k, ind + 2)
    far = t.SelectedCompletionInfo(range=t.Range(t.Position(k, ind), t.Position(k + 999, 0)), text=word)
    with pytest.raises(JsonRpcInvalidParams, match="lies outside"):
        await inline(client, uri, pos, selected=far)
    backwards = t.SelectedCompletionInfo(range=t.Range(t.Position(k, ind + 2), t.Position(k, ind)), text=word)
    with pytest.raises(JsonRpcInvalidParams, match="ends before it starts"):
        await inline(client, uri, pos, selected=backwards)
    # an item whose text would make the document too large or binary: nothing, no error
    for text in ("x" * 1_100_000, "\x00\x01" * 64):
        huge = t.SelectedCompletionInfo(range=t.Range(t.Position(k, ind), t.Position(k, ind + 2)), text=text)
        assert item_texts(await inline(client, uri, pos, selected=huge)) == []
    assert (await debug_info(client))["lastEmptyReason"].startswith("with the selected item, document")
    # the server goes on serving, the same document included
    ok = t.SelectedCompletionInfo(range=t.Range(t.Position(k, ind), t.Position(k, ind + 2)), text=word)
    res = await inline(client, uri, pos, selected=ok)
    assert res is not None and all(x.startswith(word) for x in item_texts(res))
    assert (await debug_info(client))["documents"] >= 1


async def test_accepting_a_suggestion_over_a_selected_item_starts_the_speculation(client: Any) -> None:
    """The editor applies the item (the widget's word and the completion) over the item's
    range and runs its command: the server recognises the document as the suggestion
    inserted and asks for the next completion ahead of time; the next request there is
    served without the engine."""
    for lines, k, ind, word in _spots("selected item: accepted"):
        uri, rng, res = await _ask_with_word_selected(client, f"sel-d{k}", lines, k, ind, word)
        if not item_texts(res) or "\n" in item_texts(res)[0]:
            continue
        cid = _cid(res)
        final = (await final_refine(client, cid))["text"]
        before = await debug_info(client)
        client.text_document_did_change(t.DidChangeTextDocumentParams(
            t.VersionedTextDocumentIdentifier(version=2, uri=uri),
            [t.TextDocumentContentChangePartial(range=rng, text=final)]))
        await client.workspace_execute_command_async(t.ExecuteCommandParams(
            command="llada.acceptCompletion", arguments=[cid, 0]))

        async def speculated(b: dict[str, Any] = before["counters"]) -> Any:
            info = await debug_info(client)
            c = info["counters"]
            started = c.get("speculated", 0) + c.get("speculation_skipped", 0) \
                - b.get("speculated", 0) - b.get("speculation_skipped", 0)
            return info if started and info["speculating"] == 0 and info["running"] == 0 else None

        mid = await poll(speculated, 60)
        await inline(client, uri, t.Position(k, ind + len(final)))
        after = await debug_info(client)
        assert after["engine"]["submitted"] == mid["engine"]["submitted"]  # no engine call
        if mid["counters"].get("speculated", 0) > before["counters"].get("speculated", 0):
            assert after["cache"]["hits"] == mid["cache"]["hits"] + 1
        return
    pytest.fail("the model suggested no single line after any selected word")
