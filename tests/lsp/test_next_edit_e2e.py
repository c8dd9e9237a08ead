"""`llada/nextEdit` end to end over stdio: the real server, engine and embedded model.

An edit threshold of 1e-6 (the `nextEdit.threshold` option) makes every token whose top
prediction differs from the draft a suggestion, so lines of broken tokens around the edit
must yield some: the tests assert the answer's structure (ranges in the window, never on the
edited line, old text as in the document, one suggestion per line, applying them works),
supersession and staleness, not the model's taste.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from lsp_helpers import debug_info, needs_model, open_doc, session_fixture
from lsprotocol import types as t

from llada_lsp.client import insert, next_edit, plain, send_next_edit
from llada_lsp.positions import LineIndex

pytestmark = [pytest.mark.asyncio(loop_scope="module"), needs_model]

INIT = {"nextEdit": {"threshold": 1e-6, "maxPasses": 2, "windowLines": 6}}
BROKEN = "    return x +@@ qq] zz (( 7 7 7 )) ::\n"
TEXT = ("import os\n\n\ndef f(x):\n" + BROKEN + "\n\ndef g(a):\n    y = a\n" + BROKEN
        + "\n\ndef h(b):\n" + BROKEN + "\n\n# é 😀 名前 ünï\ns = 'naïve 😀' + s[+@@ ]\n")
CURSOR_LINE = 8  # "    y = a"

client = session_fixture(INIT)


def apply(text: str, suggestions: list[dict[str, Any]]) -> str:
    """Apply LSP edits (UTF-16 columns) against `text`, from the end."""
    index = LineIndex.of(text)
    spans = []
    for s in suggestions:
        r = s["range"]
        a = index.offset(r["start"]["line"], r["start"]["character"], "utf-16")
        b = index.offset(r["end"]["line"], r["end"]["character"], "utf-16")
        spans.append((a, b, s["newText"]))
    for a, b, new in sorted(spans, reverse=True):
        text = text[:a] + new + text[b:]
    return text


def check_answer(text: str, ans: dict[str, Any], cursor_line: int, window: int) -> None:
    index = LineIndex.of(text)
    sugs = ans["suggestions"]
    keys = [(s["range"]["start"]["line"], s["range"]["start"]["character"]) for s in sugs]
    assert keys == sorted(keys), "sorted by position"
    lines = [s["line"] for s in sugs]
    assert len(set(lines)) == len(lines), "one suggestion per line"
    for s in sugs:
        r = s["range"]
        assert s["line"] == r["start"]["line"]
        assert cursor_line not in range(r["start"]["line"], r["end"]["line"] + 1), s
        assert cursor_line - window <= r["start"]["line"] and r["end"]["line"] <= cursor_line + window + 1, s
        a = index.offset(r["start"]["line"], r["start"]["character"], "utf-16")
        b = index.offset(r["end"]["line"], r["end"]["character"], "utf-16")
        assert text[a:b] == s["oldText"], s
        assert s["newText"] != s["oldText"]
        assert 0.0 < s["confidence"] <= 1.0
    # applied together they leave the cursor's line alone
    after = apply(text, sugs)
    assert after != text
    assert text.split("\n")[cursor_line] in after.split("\n")


async def test_capability_and_status(client: Any) -> None:
    caps = client.init_result.capabilities
    assert caps.experimental == {"llada": {"nextEdit": True}}
    ready = next(s for s in client.statuses if s["state"] == "ready")
    assert ready["nextEdit"] is True


async def test_broken_lines_around_an_edit_get_suggestions(client: Any) -> None:
    uri = open_doc(client, "ne_a.py", "python", TEXT, uri="file:///tmp/llada-ne/a.py")
    insert(client, uri, 2, CURSOR_LINE, 9, " + 1")  # "    y = a + 1": the edit
    text = TEXT.replace("    y = a\n", "    y = a + 1\n")
    ans = await next_edit(client, uri, 2, t.Position(CURSOR_LINE, 13))
    assert ans["version"] == 2 and "reason" not in ans, ans
    assert ans["suggestions"], "at threshold 1e-6 the broken lines must get suggestions"
    check_answer(text, ans, CURSOR_LINE, 6)
    # both sides of the edited line were asked
    assert any(s["line"] < CURSOR_LINE for s in ans["suggestions"])
    assert any(s["line"] > CURSOR_LINE for s in ans["suggestions"])
    info = await debug_info(client)
    assert info["nextEdit"]["counters"]["answered"] >= 1


async def test_a_document_with_astral_characters(client: Any) -> None:
    # the columns' mapping itself: test_next_edit_unit.py (pure)
    uri = open_doc(client, "ne_u.py", "python", TEXT, uri="file:///tmp/llada-ne/u.py")
    last = TEXT.split("\n").index("# é 😀 名前 ünï")  # the edited line; a broken one below
    ans = await next_edit(client, uri, 1, t.Position(last, 3))
    assert ans["suggestions"], ans
    check_answer(TEXT, ans, last, 6)


async def test_an_edited_range_keeps_its_lines_out(client: Any) -> None:
    uri = open_doc(client, "ne_r.py", "python", TEXT, uri="file:///tmp/llada-ne/r.py")
    edited = t.Range(t.Position(4, 0), t.Position(CURSOR_LINE, 0))  # a paste over lines 4..8
    ans = await next_edit(client, uri, 1, t.Position(CURSOR_LINE, 5), edited)
    for s in ans["suggestions"]:
        r = s["range"]
        assert r["end"]["line"] < 4 or r["start"]["line"] > CURSOR_LINE, s


async def test_stale_version_and_bad_params(client: Any) -> None:
    uri = open_doc(client, "ne_s.py", "python", TEXT, uri="file:///tmp/llada-ne/s.py")
    ans = await next_edit(client, uri, 7, t.Position(CURSOR_LINE, 0))
    assert ans["suggestions"] == [] and ans["reason"].startswith("stale"), ans
    with pytest.raises(Exception, match="past the end"):
        await next_edit(client, uri, 1, t.Position(999, 0))
    with pytest.raises(Exception, match="position"):
        await client.protocol.send_request_async("llada/nextEdit", {"textDocument": {"uri": uri}})


async def test_a_newer_request_supersedes_the_older(client: Any) -> None:
    uri = open_doc(client, "ne_b.py", "python", TEXT, uri="file:///tmp/llada-ne/b.py")
    burst = [send_next_edit(client, uri, 1, t.Position(CURSOR_LINE, k)) for k in range(4)]
    answers = [plain(a) for a in await asyncio.gather(*burst)]
    *older, newest = answers
    assert "reason" not in newest and newest["suggestions"], newest
    for a in older:
        assert a["suggestions"] == [] and a["reason"] == "superseded", a


async def test_an_edit_while_computing_makes_it_stale(client: Any) -> None:
    uri = open_doc(client, "ne_c.py", "python", TEXT, uri="file:///tmp/llada-ne/c.py")
    pending = send_next_edit(client, uri, 1, t.Position(CURSOR_LINE, 5))
    insert(client, uri, 2, CURSOR_LINE, 9, "x")
    ans = plain(await pending)
    # cancelled while the engine ran, or found stale when it started: empty either way
    assert ans["suggestions"] == [], ans
    assert ans["reason"] == "document changed" or ans["reason"].startswith("stale"), ans
