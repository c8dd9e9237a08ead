"""A slow model is shown as slow, not as nothing (issue 50, §2): the real server over stdio and
the real in-process engine with the embedded model, made slower by the step loop's test seam
(`$LLADA_TEST_STEP_DELAY_FILE`: every forward takes that many more milliseconds). The deadline
floors are set far below what a completion then takes (200 ms to a first event, 1 s in all),
so that any deadline that did not follow the measured pace would answer nothing. The machine's
own speed only adds to the step time: the deadlines follow it too, so no assertion depends on
how fast this machine is.

- cold: the first request is waited for, and `llada/status` says `warming` meanwhile;
- warm and slow: `slow: N s/step`, and the answers are not empty because of a deadline;
- stuck (the seam's delay raised to ten minutes): the request still ends, and the status says
  why (`stuck: a request got no answer in N s ...`).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from lsprotocol import types as t

from tests.llada_lsp.lsp_helpers import (
    DATA,
    debug_info,
    inline,
    item_texts,
    needs_model,
    open_doc,
    position_of,
    server_session,
)

STEP_DELAY_MS = 300
INIT = {"engine": "inprocess", "speculative": False, "threads": 1, "engineFirstEventMs": 200,
        "engineTimeoutMs": 1000, "maxTokens": {"line": 8}, "mode": "speedy"}
NEEDLE = "        return math."


async def complete_in(client: object, name: str) -> t.InlineCompletionList | None:
    """A completion after NEEDLE in a document of its own whose first line differs (so that no
    cache answers it: each request reaches the engine)."""
    text = f"# {name}\n" + (DATA / "shapes.py.txt").read_text()
    uri = open_doc(client, "shapes.py.txt", "python", text=text, uri=(DATA / name).as_uri())  # type: ignore[arg-type]
    return await inline(client, uri, position_of(text, NEEDLE))  # type: ignore[arg-type]


def paces(client: object) -> list[str]:
    return [s.get("pace", "") for s in client.statuses if s.get("state") == "ready"]  # type: ignore[attr-defined]


@needs_model
@pytest.mark.asyncio(loop_scope="function")
async def test_a_slow_model_answers_says_so_and_a_stuck_request_ends_with_its_reason(tmp_path: Path) -> None:
    delay = tmp_path / "step-delay-ms"
    delay.write_text(str(STEP_DELAY_MS))
    async with server_session(INIT, LLADA_TEST_STEP_DELAY_FILE=str(delay), LLADA_RUNTIME_DIR=str(tmp_path)) as client:
        # cold: nothing measured yet, so the first answer is waited for past the 200 ms floor
        first = await complete_in(client, "slow_first.py")
        assert "warming" in paces(client), paces(client)
        slow = await client.until(lambda: next((p for p in paces(client) if p.startswith("slow")), None), 60)
        m = re.fullmatch(r"slow: (\d+\.\d) s/step", slow)
        assert m and float(m.group(1)) >= STEP_DELAY_MS / 1000 - 0.05, slow
        # warm and slow: each request's deadlines follow the measured pace
        second = await complete_in(client, "slow_second.py")
        info = await debug_info(client)
        assert info["engine"]["timeouts"] == 0, info["engine"]
        assert not [r for r in info["emptyReasons"] if "timed out" in r["reason"]], info["emptyReasons"]
        assert item_texts(first) and item_texts(second), (first, second)

        # stuck: the request ends at its scaled deadline and the status says why
        delay.write_text("600000")
        third = await complete_in(client, "slow_third.py")
        stuck = await client.until(lambda: next((p for p in paces(client) if p.startswith("stuck")), None), 60)
        assert re.fullmatch(r"stuck: a request got no answer in [\d.]+ s, \d+\.\d+ s/step measured", stuck), stuck
        info = await debug_info(client)
        assert info["engine"]["timeouts"] >= 1
        assert item_texts(third) == []
        assert "timed out" in str(info["lastEmptyReason"]), info["lastEmptyReason"]
        delay.write_text("0")  # the worker's forward ends: the server shuts down cleanly
