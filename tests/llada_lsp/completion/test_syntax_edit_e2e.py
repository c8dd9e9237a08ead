"""Syntax-guided edit end to end: the real server, engine and model over stdio, with the
engine's drafts forced invalid (tests/llada_lsp/completion/corrupting_server.py appends " = :" to the first
line). The server must send the error's tokens back to the engine for re-masking and show
only a text that parses, never the corrupted draft."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from llada_lsp.text.syntax import adds_error
from tests.llada_lsp.lsp_helpers import (
    DATA,
    debug_info,
    first_text,
    inline,
    needs_model,
    open_doc,
    poll,
    position_of,
    session_fixture,
)

pytestmark = [pytest.mark.asyncio(loop_scope="module"), needs_model]

LAUNCHER = [sys.executable, str(Path(__file__).with_name("corrupting_server.py"))]
INIT = {"maxTokens": {"line": 12, "statements": 16, "block": 24}, "speculative": False}


client = session_fixture(INIT, LAUNCHER)


# multi-line plans (python): after each, the corrupted draft adds a parse error unless the
# model's draft is empty there (the model may change while it trains: several positions)
NEEDLES = [
    "def scale(points: list[Point], factor: float) -> list[Point]:",
    "def centroid(points: list[Point]) -> Point:\n    ",
    "def perimeter(points: list[Point]) -> float:",
    "def main() -> None:",
    'if __name__ == "__main__":',
    "    def distance(self, other: \"Point\") -> float:",
]


async def test_invalid_drafts_are_remasked_before_they_are_shown(client: Any) -> None:
    text = (DATA / "shapes.py.txt").read_text()
    exercised = []
    for k, needle in enumerate(NEEDLES):
        uri = open_doc(client, "shapes.py.txt", "python", uri=(DATA / f"syn{k}.py").as_uri())
        before = await debug_info(client)
        res = await inline(client, uri, position_of(text, needle))
        after = await poll(_idle(client), 60)
        c0, c1 = before["counters"], after["counters"]

        def grew(name: str, c0: dict[str, int] = c0, c1: dict[str, int] = c1) -> int:
            return c1.get(name, 0) - c0.get(name, 0)

        remasks = grew("syntax_remasks")
        shown = first_text(res)
        assert " = :" not in shown  # the corrupted draft is never shown
        i = text.index(needle) + len(needle)
        if shown:
            assert not adds_error("python", None, text[:i], shown, text[i:]), shown
        if not remasks:  # the model drafted nothing here, or cleaning cut the corrupted line
            continue
        exercised.append((needle, shown, grew("syntax_fixed")))
        # the remasks went to the engine as their own jobs, and the engine took them; an
        # answer left empty was decoded once more with candidates (a rescue: its own job)
        rescues = grew("empty_rescues")
        assert rescues <= 1
        assert after["engine"]["engine_calls"] - before["engine"]["engine_calls"] == 1 + remasks + rescues
        assert grew("syntax_remask_failed") == 0
        assert 1 <= grew("syntax_fixed") + grew("syntax_unfixed") <= 1 + rescues
        if len(exercised) == 2:
            break
    assert exercised, "the model drafted nothing at any position"


def _idle(client: Any) -> Any:
    async def check() -> Any:
        info = await debug_info(client)
        return info if info["running"] == 0 and info["refining"] == 0 else None
    return check
