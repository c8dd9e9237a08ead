"""`llada/nextEdit` end to end over stdio: the real server, engine and embedded model.

A renamed parameter's uses come from the edit analysis (deterministic); an added parameter's
calls are filled by the model (fill threshold 1e-6, the `nextEdit.threshold` option, so the
model's argument is suggested whatever its confidence). The tests assert the answers'
structure (ranges in UTF-16, never the edited line, old text as in the document, no parse
error added when applied), supersession and staleness, not the model's taste.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from lsprotocol import types as t

from llada_lsp.client import insert, next_edit, plain, send_next_edit
from llada_lsp.text.positions import LineIndex
from llada_lsp.text.syntax import count_errors, parser_for
from tests.llada_lsp.lsp_helpers import debug_info, needs_model, open_doc, session_fixture

pytestmark = [pytest.mark.asyncio(loop_scope="module"), needs_model]

INIT = {"nextEdit": {"enabled": True, "threshold": 1e-6}}
RENAME = ("def area(width, height):\n    label = '😀 width'  # width\n    s = '名前😀' + str(width)\n"
          "    return width * height\n\n\ndef other(width):\n    return width\n")
PARAM = "def greet(name):\n    print('hello', name)\n\n\ndef main(user, greeting):\n    greet(user)\n    greet(user)\n"

client = session_fixture(INIT)


def apply(text: str, suggestions: list[dict[str, Any]]) -> str:
    """Apply LSP edits (UTF-16 columns) against `text`, from the end."""
    index = LineIndex.of(text)
    spans = []
    for s in suggestions:
        r = s["range"]
        a = index.offset(r["start"]["line"], r["start"]["character"], "utf-16")
        b = index.offset(r["end"]["line"], r["end"]["character"], "utf-16")
        assert text[a:b] == s["oldText"], s
        spans.append((a, b, s["newText"]))
    for a, b, new in sorted(spans, reverse=True):
        text = text[:a] + new + text[b:]
    return text


def errors(text: str) -> int:
    parser = parser_for("python")
    assert parser is not None
    return count_errors(parser.parse(text.encode()).root_node)


async def test_capability_and_status(client: Any) -> None:
    caps = client.init_result.capabilities
    assert caps.experimental == {"llada": {"nextEdit": True}}
    ready = next(s for s in client.statuses if s["state"] == "ready")
    assert ready["nextEdit"] is True


async def test_a_rename_reaches_its_uses_only(client: Any) -> None:
    uri = open_doc(client, "ne_a.py", "python", RENAME, uri="file:///tmp/llada-ne/a.py")
    insert(client, uri, 2, 0, 14, "_px")  # def area(width_px, height)
    text = RENAME.replace("def area(width,", "def area(width_px,")
    ans = await next_edit(client, uri, 2, t.Position(0, 17))
    assert ans["kind"] == "rename", ans
    sugs = ans["suggestions"]
    # the uses in area only: not the string, the comment, nor other()'s own parameter
    assert [(s["line"], s["oldText"], s["newText"], s["source"]) for s in sugs] == [
        (2, "width", "width_px", "analysis"), (3, "width", "width_px", "analysis")]
    assert sugs[0]["range"]["start"]["character"] == len("    s = '名前😀' + str(")  + 1  # UTF-16: 😀 is two units
    after = apply(text, sugs)
    assert errors(after) == errors(text) == 0
    assert "def other(width):\n    return width\n" in after and "'😀 width'  # width" in after
    info = await debug_info(client)
    assert info["nextEdit"]["counters"]["kind_rename"] >= 1


async def test_an_added_parameter_is_filled_at_each_call(client: Any) -> None:
    uri = open_doc(client, "ne_p.py", "python", PARAM, uri="file:///tmp/llada-ne/p.py")
    insert(client, uri, 2, 0, 14, ", greeting")
    text = PARAM.replace("def greet(name)", "def greet(name, greeting)")
    ans = await next_edit(client, uri, 2, t.Position(0, 24))
    assert ans["kind"] == "param_added", ans
    sugs = ans["suggestions"]
    assert sugs, ans
    for s in sugs:
        assert s["line"] in (5, 6) and s["oldText"] == "" and s["newText"].startswith(", ")
        if s["source"] == "placeholder":  # the model's fill came back empty: the name to type over
            assert s["newText"] == ", greeting" and s["placeholder"] == {"start": 2, "end": 10}
        else:
            assert s["source"] == "model" and 0.0 < s["confidence"] <= 1.0 and "placeholder" not in s
        assert errors(apply(text, [s])) == 0, s  # none adds a parse error


async def test_nothing_before_an_edit_and_for_noise(client: Any) -> None:
    uri = open_doc(client, "ne_n.py", "python", PARAM, uri="file:///tmp/llada-ne/n.py")
    ans = await next_edit(client, uri, 1, t.Position(0, 0))
    assert ans["suggestions"] == [] and ans["reason"].startswith("no edit since"), ans
    insert(client, uri, 2, 1, 18, " world")  # a string changed: nothing follows
    ans = await next_edit(client, uri, 2, t.Position(1, 24))
    assert ans["suggestions"] == [] and ans["reason"].startswith("no follow-up"), ans


async def test_stale_version_and_bad_params(client: Any) -> None:
    uri = open_doc(client, "ne_s.py", "python", PARAM, uri="file:///tmp/llada-ne/s.py")
    ans = await next_edit(client, uri, 7, t.Position(0, 0))
    assert ans["suggestions"] == [] and ans["reason"].startswith("stale"), ans
    with pytest.raises(Exception, match="past the end"):
        await next_edit(client, uri, 1, t.Position(999, 0))
    with pytest.raises(Exception, match="position"):
        await client.protocol.send_request_async("llada/nextEdit", {"textDocument": {"uri": uri}})


async def test_a_newer_request_supersedes_the_older(client: Any) -> None:
    uri = open_doc(client, "ne_b.py", "python", PARAM, uri="file:///tmp/llada-ne/b.py")
    insert(client, uri, 2, 0, 14, ", greeting")
    burst = [send_next_edit(client, uri, 2, t.Position(0, k)) for k in range(3)]
    answers = [plain(a) for a in await asyncio.gather(*burst)]
    *older, newest = answers
    assert newest["kind"] == "param_added" and "reason" not in newest, newest
    for a in older:
        assert a["suggestions"] == [] and a["reason"] == "superseded", a


async def test_an_edit_while_computing_makes_it_stale(client: Any) -> None:
    uri = open_doc(client, "ne_c.py", "python", PARAM, uri="file:///tmp/llada-ne/c.py")
    insert(client, uri, 2, 0, 14, ", greeting")
    pending = send_next_edit(client, uri, 2, t.Position(0, 5))
    insert(client, uri, 3, 6, 0, "x")
    ans = plain(await pending)
    assert ans["suggestions"] == [], ans
    assert ans["reason"] == "document changed" or ans["reason"].startswith("stale"), ans


async def test_the_server_answers_while_a_huge_next_edit_runs(client: Any) -> None:
    """A parameter added to a function called 190,000 times (950 KB, under the 1 MB limit): while
    the next-edit request is analysed on its worker thread, status requests are answered (the
    server says a next-edit is running); the request ends with the site limit's reason."""
    text = "def f(a):\n    return a\n\n\n" + "f(1)\n" * 190_000
    uri = open_doc(client, "ne_huge.py", "python", text, uri="file:///tmp/llada-ne/huge.py")
    insert(client, uri, 2, 0, 7, ", b")
    pending = asyncio.ensure_future(send_next_edit(client, uri, 2, t.Position(0, 10)))
    running = []
    while not pending.done():
        running.append((await debug_info(client))["nextEdit"]["running"])
        if running[-1]:
            break
    assert running and running[-1] == 1, running  # answered while the next-edit ran
    ans = plain(await pending)
    assert ans["suggestions"] == [] and ans["limit"] == "sites", ans
    assert (await debug_info(client))["nextEdit"]["running"] == 0
