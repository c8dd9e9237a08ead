"""Workspace context on the wire: the `complete` message's optional `context` list of
{path, text} (docs/protocol.md), its round trip and its validation."""

from __future__ import annotations

import json

import pytest

from engine.api import CompletionRequest, ContextChunk, Plan
from engine.daemon import protocol as P


def frame(**extra: object) -> str:
    return json.dumps({"type": "complete", "id": "r1", "doc": "a.py", "prefix": "x = ", "suffix": "", **extra})


def test_context_round_trips() -> None:
    ctx = (ContextChunk("pkg/util.py", "def helper(a):\n    return a\n"), ContextChunk("b.py", "Y = 2\n"))
    req = CompletionRequest("r1", "a.py", "x = ", "\n", Plan(max_tokens=8), ctx)
    msg = P.parse(P.dumps(P.complete_message(req)))
    assert isinstance(msg, P.Complete)
    assert msg.request == req
    assert msg.request.context == ctx


def test_no_context_is_left_out_and_parses_empty() -> None:
    req = CompletionRequest("r1", "a.py", "x = ", "")
    assert "context" not in P.complete_message(req)
    msg = P.parse(frame())
    assert isinstance(msg, P.Complete) and msg.request.context == ()
    msg = P.parse(frame(context=None))
    assert isinstance(msg, P.Complete) and msg.request.context == ()


@pytest.mark.parametrize("context, needle", [
    ("def f(): pass", "must be a list"),
    ({"path": "a", "text": "b"}, "must be a list"),
    (["a.py"], "context[0] must be an object"),
    ([{"path": "a.py"}], "context[0].path and context[0].text must be strings"),
    ([{"path": "a.py", "text": 3}], "must be strings"),
    ([{"path": None, "text": "x"}], "must be strings"),
    ([{"path": "a.py", "text": "x", "extra": 1}], "context[0] must be an object with the fields path and text"),
    ([{"path": "a.py", "text": "x"}] * (P.MAX_CONTEXT_CHUNKS + 1), f"at most {P.MAX_CONTEXT_CHUNKS}"),
    ([{"path": "a.py", "text": "x" * (P.MAX_CONTEXT_CHARS // 2)}] * 2, f"more than {P.MAX_CONTEXT_CHARS}"),
])
def test_bad_context_is_a_clear_error(context: object, needle: str) -> None:
    with pytest.raises(P.ProtocolError) as e:
        P.parse(frame(context=context))
    assert e.value.code == P.BAD_MESSAGE
    assert e.value.request_id == "r1"  # the error event names the request
    assert needle in str(e.value)


def test_lone_surrogates_in_context_become_replacement_characters() -> None:
    msg = P.parse('{"type":"complete","id":"r","doc":"a","prefix":"","suffix":"",'
                  '"context":[{"path":"p\\ud800","text":"t\\udc00x"}]}')
    assert isinstance(msg, P.Complete)
    assert msg.request.context == (ContextChunk("p\ufffd", "t\ufffdx"),)
