"""`llada/nextEdit` placeholders end to end over stdio: the real server with the embedded model
at its default (fills gated off, so no engine job), driven by pytest-lsp. An added parameter
and an added dataclass field get, at each call / constructor, an insertion whose content is the
name, marked with `placeholder` offsets into `newText` in UTF-16 code units; lines with
non-BMP characters check that `range` and the offsets count UTF-16 units."""

from __future__ import annotations

from typing import Any

import pytest
from lsprotocol import types as t

from llada_lsp.client import insert, next_edit
from llada_lsp.text.positions import LineIndex
from llada_lsp.text.syntax import count_errors, parser_for
from tests.llada_lsp.lsp_helpers import debug_info, needs_model, open_doc, session_fixture

pytestmark = [pytest.mark.asyncio(loop_scope="module"), needs_model]

client = session_fixture({"nextEdit": {"enabled": True}})  # threshold unset: the gate's, fills off

PARAM = ("def greet(name):\n    print('hello', name)\n\n\n"
         "def main(user):\n    s = '😀'; greet(user)\n    greet(name='名前')\n")
FIELDS = ("from dataclasses import dataclass\n\n\n@dataclass\nclass Item:\n    label: str\n    price: float\n\n\n"
          "a = Item('😀 tea', 2.5)\nb = Item(label='名前', price=1.0)\n")


def apply(text: str, s: dict[str, Any]) -> tuple[str, str]:
    """The text with the suggestion applied (UTF-16 range), and the placeholder's text in it."""
    index = LineIndex.of(text)
    r = s["range"]
    a = index.offset(r["start"]["line"], r["start"]["character"], "utf-16")
    b = index.offset(r["end"]["line"], r["end"]["character"], "utf-16")
    assert text[a:b] == s["oldText"], s
    units = s["newText"].encode("utf-16-le")
    ph = units[2 * s["placeholder"]["start"]:2 * s["placeholder"]["end"]].decode("utf-16-le")
    return text[:a] + s["newText"] + text[b:], ph


def errors(text: str) -> int:
    parser = parser_for("python")
    assert parser is not None
    return count_errors(parser.parse(text.encode()).root_node)


async def test_an_added_parameter_gets_a_placeholder_at_each_call(client: Any) -> None:
    uri = open_doc(client, "ph_p.py", "python", PARAM, uri="file:///tmp/llada-ne/ph_p.py")
    insert(client, uri, 2, 0, 14, ", größe")  # def greet(name, größe)
    text = PARAM.replace("def greet(name)", "def greet(name, größe)")
    ans = await next_edit(client, uri, 2, t.Position(0, 21))
    assert ans["kind"] == "param_added", ans
    sugs = ans["suggestions"]
    assert [(s["line"], s["oldText"], s["newText"], s["source"], s["confidence"], s["placeholder"])
            for s in sugs] == [(5, "", ", größe", "placeholder", 0.0, {"start": 2, "end": 7}),
                               (6, "", ", größe=größe", "placeholder", 0.0, {"start": 8, "end": 13})]
    # after `s = '😀'; greet(user`: the emoji is two UTF-16 units
    assert sugs[0]["range"]["start"] == {"line": 5, "character": len("    s = '😀'; greet(user") + 1}
    for s in sugs:
        after, ph = apply(text, s)
        assert ph == "größe" and errors(after) == 0
    info = await debug_info(client)
    assert info["nextEdit"]["counters"]["kind_param_added"] >= 1


async def test_an_added_dataclass_field_gets_a_placeholder_at_each_constructor(client: Any) -> None:
    uri = open_doc(client, "ph_f.py", "python", FIELDS, uri="file:///tmp/llada-ne/ph_f.py")
    insert(client, uri, 2, 6, 0, "    qty: int\n")  # between label and price
    text = FIELDS.replace("    price: float\n", "    qty: int\n    price: float\n")
    ans = await next_edit(client, uri, 2, t.Position(6, 12))
    assert ans["kind"] == "field_added" and ans["detail"] == "Item: +qty at 1", ans
    sugs = ans["suggestions"]
    assert [(s["line"], s["newText"], s["source"], s["placeholder"]) for s in sugs] == [
        (10, "qty, ", "placeholder", {"start": 0, "end": 3}),
        (11, ", qty=qty", "placeholder", {"start": 6, "end": 9})]
    assert sugs[0]["range"]["start"] == {"line": 10, "character": len("a = Item('😀 tea', ") + 1}
    got = []
    for s in sugs:
        after, ph = apply(text, s)
        assert ph == "qty" and errors(after) == 0
        got.append(after.splitlines()[s["line"]])
    assert got == ["a = Item('😀 tea', qty, 2.5)", "b = Item(label='名前', price=1.0, qty=qty)"]
