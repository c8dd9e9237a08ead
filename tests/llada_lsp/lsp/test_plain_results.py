"""A `llada/*` method's plain-dict result is encoded by `json.dumps` as it is, not walked by
pygls' converter first (llada_lsp.lsp.protocol.LladaProtocol._serialize_message): the walk, a
Python call per value, held the event loop ~200 ms for a next-edit answer of 999 suggestions.
The bytes written are the converter's own, and typed (lsprotocol) results still go through it.
Counts of converter calls, not timings."""

from __future__ import annotations

import json
from typing import Any

import pytest
from lsprotocol import types as t
from pygls.protocol.json_rpc import JsonRPCResponseMessage

from llada_lsp.lsp.server import LladaServer


class Capture:
    def __init__(self) -> None:
        self.data: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.data.append(data)

    def close(self) -> None:
        pass


class Counting:
    """The converter, its `unstructure` calls counted."""

    def __init__(self, real: Any) -> None:
        self.real, self.calls = real, list[type]()

    def unstructure(self, obj: Any, *args: Any) -> Any:
        self.calls.append(type(obj))
        return self.real.unstructure(obj, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


def answer(n: int) -> dict[str, Any]:
    rng = {"start": {"line": 3, "character": 4}, "end": {"line": 3, "character": 4}}
    return {"version": 2, "suggestions": [{"range": rng, "newText": f"b{i}", "oldText": "", "confidence": None}
                                          for i in range(n)], "kind": "param_added", "detail": "b"}


def body(data: bytes) -> Any:
    return json.loads(data.split(b"\r\n\r\n", 1)[1])


def test_a_plain_result_is_encoded_without_the_converter(monkeypatch: pytest.MonkeyPatch) -> None:
    proto = LladaServer().protocol
    out = Capture()
    proto.set_writer(out)
    real = proto._converter
    counting = Counting(real)
    monkeypatch.setattr(proto, "_converter", counting)
    calls = counting.calls
    unstructure = real.unstructure
    result = answer(999)
    expected = json.loads(json.dumps(unstructure(JsonRPCResponseMessage(id=7, jsonrpc="2.0", result=result))))
    proto._send_response(7, result)
    assert calls == [] and body(out.data[-1]) == expected  # the same message, no walk
    # a typed result still goes through the converter (lsprotocol's own JSON names)
    item = t.InlineCompletionItem(insert_text="x", range=t.Range(t.Position(0, 0), t.Position(0, 1)))
    proto._send_response(8, t.InlineCompletionList(items=[item]))
    assert calls and body(out.data[-1])["result"]["items"][0]["insertText"] == "x"
