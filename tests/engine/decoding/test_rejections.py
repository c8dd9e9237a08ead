"""Typed rejections of the step loop (engine.decoding.rejections) and their wire codes (docs/protocol.md)."""

from __future__ import annotations

import re
from pathlib import Path

from engine.daemon import protocol as P
from engine.decoding.rejections import Rejection, RejectKind, TooLong, rejection_of

DOC = Path(__file__).resolve().parents[3] / "docs" / "protocol.md"


def test_every_kind_has_a_documented_wire_code() -> None:
    documented = set(re.findall(r"^\| `(\w+)` \|", DOC.read_text(), re.M))
    for kind in RejectKind:
        code = P.wire_code(Rejection(kind, "x"))
        assert code in documented, (kind, code)
    assert P.wire_code(None) is None
    assert P.wire_code(Rejection(RejectKind.BUSY, "")) == P.BUSY
    assert P.wire_code(Rejection(RejectKind.BAD_REQUEST, "")) == P.INVALID_PLAN


def test_failures_become_rejections() -> None:
    too_long = rejection_of(TooLong("prompt of 9 tokens + 8 new exceeds the cache (16)"))
    assert too_long.kind is RejectKind.TOO_LONG and "exceeds the cache" in too_long.message
    assert P.wire_code(too_long) == P.PROMPT_TOO_LONG
    other = rejection_of(RuntimeError("boom"))
    assert other == Rejection(RejectKind.INTERNAL, "RuntimeError: boom")
