"""The shared LSP client (llada_lsp/client.py) without a server: notifications are recorded
as plain dicts with their arrival times, and `until` wakes on the one it waits for."""

from __future__ import annotations

import asyncio
from collections import namedtuple
from typing import Any

import pytest
from lsprotocol import types as t

from llada_lsp.client import LladaClient, completion_id, item_texts, plain

Refine = namedtuple("Refine", "completionId final text")


def _deliver(client: LladaClient, method: str, params: Any) -> None:
    client.protocol.fm.features[method](params)  # as pygls does for an incoming notification


def test_until_wakes_on_the_notification_it_waits_for() -> None:
    async def scenario() -> tuple[dict[str, Any], LladaClient]:
        client = LladaClient()
        loop = asyncio.get_running_loop()
        loop.call_soon(_deliver, client, "llada/refine", Refine("7", False, "a"))
        loop.call_soon(_deliver, client, "llada/stats", {"completionId": "8"})
        loop.call_soon(_deliver, client, "llada/refine", Refine("7", True, "ab"))
        return await client.final_refine("7", timeout=5), client

    final, client = asyncio.run(scenario())
    assert final == {"completionId": "7", "final": True, "text": "ab"}  # a namedtuple, as dict
    notes = client.refines_of("7")
    assert [n.params["text"] for n in notes] == ["a", "ab"] and notes[0].at <= notes[1].at
    assert client.stats_of("8") == {"completionId": "8"} and client.stats_of("7") is None


def test_until_times_out_when_nothing_comes() -> None:
    async def scenario() -> None:
        client = LladaClient()
        asyncio.get_running_loop().call_soon(_deliver, client, "llada/status",
                                             {"state": "loading", "message": ""})
        await client.engine_settled(timeout=0.2)

    with pytest.raises(TimeoutError):
        asyncio.run(scenario())


def test_answer_helpers() -> None:
    cmd = t.Command("accept", "llada.acceptCompletion", arguments=["12"])
    res = t.InlineCompletionList([t.InlineCompletionItem("x = 1", command=cmd),
                                  t.InlineCompletionItem(t.StringValue("y"))])
    assert item_texts(res) == ["x = 1", "y"] and completion_id(res) == "12"
    assert item_texts(None) == [] and completion_id(t.InlineCompletionList([])) is None
    assert plain([Refine("1", True, "z")]) == [{"completionId": "1", "final": True, "text": "z"}]
