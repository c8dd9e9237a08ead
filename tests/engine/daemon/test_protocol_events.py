"""Engine events on the wire (docs/protocol.md, "Daemon -> client"): a round trip keeps every
field; the text is the whole middle, with no edits against the previous event (the language
server diffs what it shows); an older daemon's `edits` field is ignored."""

from __future__ import annotations

import json

from engine.api import EngineEvent
from engine.daemon import protocol as P


def test_events_round_trip_without_edits() -> None:
    done = EngineEvent("done", "r1", "return n", step=5, draft_complete=True, reason="stop_rule",
                       stats={"forwards": 5}, alternatives=("return m",))
    for ev in (EngineEvent("draft", "r1", "return", step=3, draft_complete=True), done):
        msg = json.loads(P.dumps(P.event_message(ev)))
        assert "edits" not in msg and msg["type"] == ev.kind and msg["id"] == "r1"
        assert P.event_from_message(msg) == ev
    assert "edits" not in P.error_message(P.INTERNAL, "boom", "r1")


def test_an_older_daemons_edits_are_ignored() -> None:
    old = {"type": "edit", "id": "r1", "text": "return n", "step": 4, "draft_complete": True,
           "edits": [{"start": 6, "end": 6, "text": " n"}], "reason": None, "error": None, "stats": None}
    assert P.event_from_message(old) == EngineEvent("edit", "r1", "return n", step=4, draft_complete=True)
