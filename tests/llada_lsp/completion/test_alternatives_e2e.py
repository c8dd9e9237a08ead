"""Alternatives end to end over stdio: a server in quality mode gets the engine's other
candidates with each done event (reported in `llada/stats`), and its line suggestions stay
lines whichever candidate it shows."""

from __future__ import annotations

from typing import Any

import pytest

from tests.llada_lsp.lsp_helpers import (
    DATA,
    inline,
    needs_model,
    open_doc,
    poll,
    position_of,
    session_fixture,
)

pytestmark = [pytest.mark.asyncio(loop_scope="module"), needs_model]

INIT = {"mode": "quality", "maxTokens": {"line": 12, "statements": 16, "block": 24}}
# line completions in the shapes file: the cursor right after each needle, the rest of its line
# gone (a suggestion must finish the line: the parse-error guard withholds one that does not)
NEEDLES = ["        b = ", "        return math.", "    name = "]


client = session_fixture(INIT)


async def test_quality_mode_decodes_and_weighs_alternatives(client: Any) -> None:
    seen = []
    for j, needle in enumerate(NEEDLES):
        text = (DATA / "shapes.py.txt").read_text()
        i = text.index(needle) + len(needle)
        text = text[:i] + text[text.index("\n", i):]
        uri = open_doc(client, "shapes.py.txt", "python", text=text, uri=(DATA / f"alt{j}.py").as_uri())
        res = await inline(client, uri, position_of(text, needle))
        if not res or not res.items or res.items[0].command is None:
            continue
        cid = str(res.items[0].command.arguments[0])
        final = await poll(lambda c=cid: next((r for r in client.refines if r["completionId"] == c and r["final"]),
                                              None), 60)
        stats = await poll(lambda c=cid: next((s for s in client.stats if s["completionId"] == c), None), 60)
        seen.append(stats)
        assert stats["source"] == "engine" and stats["groupForwards"] >= stats["forwards"]
        assert "\n" not in final["text"]
    assert seen, "no completion reached the engine"
    assert any(s["alternatives"] >= 1 for s in seen)  # the engine returned other candidates
