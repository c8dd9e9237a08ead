"""The parse-error guard (issue 51) with the real model: the real server, engine and the
embedded tiny-code over stdio, at cursors a user meets while typing (a line cut after a
token, a new function's header, after an auto-closed `(`, a blank line). Every item shown,
and every refinement of it, applied as the editor applies it, leaves a file that Python's
own parser accepts."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest
from lsprotocol import types as t

from llada_lsp.completion.line_rest import rest_of_line
from tests.llada_lsp.lsp_helpers import (
    completion_id,
    inline,
    item_texts,
    needs_model,
    open_doc,
    session_fixture,
)

pytestmark = [pytest.mark.asyncio(loop_scope="module"), needs_model]

client = session_fixture({"speculative": False, "mode": "speedy"})

SOURCE = '''import math
from dataclasses import dataclass


@dataclass
class Point:
    x: float
    y: float

    def distance(self, other: "Point") -> float:
        dx = self.x - other.x
        dy = self.y - other.y
        return math.sqrt(dx * dx + dy * dy)


def perimeter(points: list[Point]) -> float:
    total = 0.0
    for i in range(len(points)):
        a = points[i]
        b = points[(i + 1) % len(points)]
        total += a.distance(b)
    return total


def main() -> None:
    square = [Point(0, 0), Point(1, 0), Point(1, 1), Point(0, 1)]
    print(perimeter(square))
'''

# (the line as the user has it, with | at the cursor; the line it replaces in SOURCE)
SITES = [
    ("        dx = self.x -|", "        dx = self.x - other.x"),
    ("        return math.sqrt(|)", "        return math.sqrt(dx * dx + dy * dy)"),
    ("    for i in range(|)", "    for i in range(len(points)):"),
    ("        total +=|", "        total += a.distance(b)"),
    ("    return|", "    return total"),
    ("    print(|)", "    print(perimeter(square))"),
    ("|", "    total = 0.0"),
    ("def area|", None),  # a new function: only its header begun, above main
    ("    def area(self|", None),  # a new method, below distance
]


def site(line: str, replaces: str | None) -> tuple[str, int]:
    if replaces is not None:
        text = SOURCE.replace(replaces + "\n", line.replace("|", "") + "\n", 1)
        anchor = line.replace("|", "")
    elif line.startswith("def"):
        text = SOURCE.replace("def main", line.replace("|", "") + "\n\n\ndef main", 1)
        anchor = line.replace("|", "")
    else:
        text = SOURCE.replace("\n\ndef perimeter", "\n" + line.replace("|", "") + "\n\n\ndef perimeter", 1)
        anchor = line.replace("|", "")
    return text, text.index(anchor + "\n") + line.index("|")


def parses(text: str) -> bool:
    try:
        ast.parse(text)
    except SyntaxError:
        return False
    return True


async def test_no_item_or_refinement_adds_a_parse_error(client: Any) -> None:
    shown = 0
    for k, (line, replaces) in enumerate(SITES):
        text, offset = site(line, replaces)
        uri = open_doc(client, Path(f"/tmp/guard_model_{k}.py"), "python", text=text)
        row = text.count("\n", 0, offset)
        res = await inline(client, uri, t.Position(row, offset - (text.rfind("\n", 0, offset) + 1)))
        rest = rest_of_line(text, offset)
        for item_text in item_texts(res):
            after = text[:offset] + item_text + text[offset + len(rest):]
            assert parses(after), (line, item_text)
            shown += 1
        cid = completion_id(res)
        if cid is None:
            continue
        final = await client.final_refine(cid, 120)
        for r in [n for n in client.refines if n["completionId"] == cid] + [final]:
            body = r["text"]  # the item's insert text after this refinement
            assert parses(text[:offset] + body + text[offset + len(rest):]), (line, body)
    assert shown >= 3, f"the model showed {shown} items at {len(SITES)} cursors"

