"""The `next_edit` wire message (docs/protocol.md): validation, the round trip of suggestions,
and the daemon's answer equal to the in-process engine's for the same request."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import pytest
from daemon_helpers import serve_in_thread, stop_served

from engine.api import EditSuggestion, EngineEvent, NextEditRequest
from engine.daemon import protocol as P
from engine.service import TextEngine
from llada_lsp.ws_engine import WsConnection, WsEngineClient

PREFIX = "import os\n\n\n"
REGION = "def f(x):\n    return x +@@ qq] zz (( 7 7 7 )) ::\n\n\ndef g(y):\n    return f(y) * 2\n"
SUFFIX = "\n\nprint(g(3))\n"
TOKEN = "next-edit-token"


def msg(**over: object) -> str:
    d: dict[str, object] = {"type": "next_edit", "id": "n1", "doc": "a.py", "prefix": PREFIX, "region": REGION,
                            "suffix": SUFFIX, "threshold": 0.5, "max_passes": 3}
    d.update(over)
    return json.dumps({k: v for k, v in d.items() if v is not ...})


def test_parse_next_edit() -> None:
    m = P.parse(msg())
    assert isinstance(m, P.NextEdit)
    assert m.request == NextEditRequest("n1", "a.py", PREFIX, REGION, SUFFIX, threshold=0.5, max_passes=3)
    m = P.parse(msg(threshold=None, max_passes=..., preset="quality", deadline_ms=500))
    assert isinstance(m, P.NextEdit) and m.deadline_ms == 500
    assert m.request.threshold is None and m.request.max_passes == 4 and m.request.preset == "quality"
    assert P.parse(msg(threshold=1)).request.threshold == 1.0  # type: ignore[union-attr]
    # the client's message parses back into the same request
    req = NextEditRequest("n2", "b.py", "p", "r\ud800", "s", threshold=0.25, preset="speedy", max_passes=2)
    back = P.parse(P.dumps(P.next_edit_message(req)))
    assert isinstance(back, P.NextEdit) and back.request == NextEditRequest("n2", "b.py", "p", "r\ufffd", "s",
                                                                             0.25, "speedy", 2)


@pytest.mark.parametrize(("over", "code"), [
    ({"region": ...}, P.BAD_MESSAGE),
    ({"region": ""}, P.BAD_MESSAGE),
    ({"region": 7}, P.BAD_MESSAGE),
    ({"region": "x" * (P.MAX_REGION_CHARS + 1)}, P.BAD_MESSAGE),
    ({"threshold": 0}, P.BAD_MESSAGE),
    ({"threshold": -0.5}, P.BAD_MESSAGE),
    ({"threshold": 1.01}, P.BAD_MESSAGE),
    ({"threshold": "0.5"}, P.BAD_MESSAGE),
    ({"threshold": True}, P.BAD_MESSAGE),
    ({"max_passes": 0}, P.BAD_MESSAGE),
    ({"max_passes": 17}, P.BAD_MESSAGE),
    ({"max_passes": 2.5}, P.BAD_MESSAGE),
    ({"max_passes": False}, P.BAD_MESSAGE),
    ({"preset": 3}, P.INVALID_PLAN),
    ({"doc": ...}, P.BAD_MESSAGE),
    ({"id": ""}, P.BAD_MESSAGE),
])
def test_bad_next_edit_messages(over: dict[str, object], code: str) -> None:
    with pytest.raises(P.ProtocolError) as e:
        P.parse(msg(**over))
    assert e.value.code == code


def test_suggestions_round_trip() -> None:
    ev = EngineEvent("done", "n1", "def g(x):\n", reason="end_of_middle", stats={"forwards": 2},
                     suggestions=(EditSuggestion(4, 5, "g", 0.93), EditSuggestion(7, 7, "é😀", 0.5)))
    back = P.event_from_message(json.loads(P.dumps(P.event_message(ev))))
    assert back == ev
    plain = P.event_from_message(json.loads(P.dumps(P.event_message(EngineEvent("draft", "c", "x")))))
    assert plain.suggestions == ()


@pytest.fixture(scope="module")
def eng() -> Iterator[TextEngine]:
    yield TextEngine(threads=1)


def test_daemon_and_in_process_give_the_same_suggestions(eng: TextEngine) -> None:
    req = NextEditRequest("d1", "a.py", PREFIX, REGION, SUFFIX, threshold=0.05, max_passes=3)
    eng.prompt_cache.clear()
    local = list(eng.next_edit(req))[-1]
    assert local.kind == "done" and local.suggestions
    s = serve_in_thread(eng, token=TOKEN, max_batch=2)

    async def run() -> tuple[EngineEvent, list[EngineEvent], dict]:
        conn = await WsConnection.open(s.url, TOKEN)
        try:
            raw = [ev async for ev in conn.next_edit(req)]
            # a bad one gets its error code, the connection stays usable
            bad = [ev async for ev in conn.next_edit(NextEditRequest("d2", "a.py", PREFIX, REGION, SUFFIX,
                                                                      preset="one_per_step"))]
            hello = conn.hello
        finally:
            await conn.close()
        client = WsEngineClient(s.url, token=TOKEN)
        await client.start(lambda _m, _p: None)
        client.set_deadlines(0, 0)
        try:
            job = client.next_edit(req)
            evs = [e async for e, _ in job.events()]
        finally:
            await client.close()
        return raw[-1], [*bad, *evs], hello

    try:
        raw, rest, hello = asyncio.run(run())
    finally:
        stop_served(s)
    bad, via_client = rest[0], rest[-1]
    assert hello["capabilities"]["next_edit"] is True and hello["limits"]["max_region_chars"] == P.MAX_REGION_CHARS
    for got in (raw, via_client):
        assert got.kind == "done", got
        assert got.suggestions == local.suggestions and got.text == local.text
        assert got.stats is not None and local.stats is not None and got.stats["forwards"] == local.stats["forwards"]
    assert bad.kind == "error" and bad.error is not None and bad.error.startswith(P.INVALID_PLAN)
