"""Why the step loop refused or ended a request without a done event: a typed value, not a wire
code. The daemon maps each kind to its wire code (`engine.daemon.protocol.wire_code`); the in-process
engine reports the message in an error event.

A superseded or cancelled request is no rejection: it ends with a done event whose reason says
so (`engine.api.DoneReason`).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class RejectKind(Enum):
    BUSY = "busy"  # every row is taken (or the row went to another connection): retry later
    TOO_LONG = "too_long"  # the prompt and budget do not fit the canvas
    BAD_REQUEST = "bad_request"  # the request itself is wrong (an unknown preset)
    UNKNOWN_REQUEST = "unknown_request"  # remask of a request the loop no longer remembers
    DUPLICATE = "duplicate"  # a request with this id is already running
    INTERNAL = "internal"  # the request failed inside the engine


@dataclass(frozen=True)
class Rejection:
    kind: RejectKind
    message: str


class TooLong(ValueError):
    """The prompt and the token budget do not fit the model's canvas (a decoder's check)."""


def rejection_of(e: BaseException) -> Rejection:
    """The rejection of a request that failed while it started or ran: `TOO_LONG` for a
    canvas that cannot hold it, anything else `INTERNAL`."""
    kind = RejectKind.TOO_LONG if isinstance(e, TooLong) else RejectKind.INTERNAL
    return Rejection(kind, f"{type(e).__name__}: {e}")
