"""The daemon's wire protocol: versioned JSON text frames over a websocket (docs/protocol.md).

Pure Python (no torch): the language server's websocket client imports it too. `parse`
turns one frame into a typed message or raises `ProtocolError` with a machine-readable code;
the server answers that with an error event and the connection stays usable.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from engine.api import (
    MAX_ALTERNATIVES,
    CompletionRequest,
    ContextChunk,
    EngineEvent,
    Names,
    Plan,
)
from engine.decoding.rejections import Rejection, RejectKind

PROTOCOL_VERSION = 1
MAX_ID_CHARS = 256
DEFAULT_MAX_MESSAGE = 1 << 20  # application limit: larger frames get a "too_large" error event
MAX_CONTEXT_CHUNKS = 64  # workspace context: chunks of one `complete` at most
MAX_CONTEXT_CHARS = 256 * 1024  # and their paths and texts together, in characters
HARD_FRAME_FACTOR = 4  # frames above factor x the limit close the connection (code 1009)

# close codes the daemon uses (besides 1000 and websockets' own 1009 "message too big")
CLOSE_POLICY = 1008  # wrong token, no authentication in time, too much sent before it
CLOSE_SLOW_READER = 1013  # more replies unread than the backlog allows: reconnect and read them
CLOSE_TRY_AGAIN = 1013  # no connection slot free (handshakes that raced for the last one)

# error codes (the "code" field of error events)
BAD_JSON = "bad_json"
BAD_MESSAGE = "bad_message"
UNKNOWN_TYPE = "unknown_type"
TOO_LARGE = "too_large"
PROMPT_TOO_LONG = "prompt_too_long"
INVALID_PLAN = "invalid_plan"
BUSY = "busy"
UNAUTHORIZED = "unauthorized"
UNKNOWN_MODEL = "unknown_model"
UNKNOWN_REQUEST = "unknown_request"
DUPLICATE_ID = "duplicate_id"
UNSUPPORTED_VERSION = "unsupported_version"
INTERNAL = "internal"

# the wire code of each way the step loop refuses a request (engine.decoding.rejections)
WIRE_CODES: dict[RejectKind, str] = {
    RejectKind.BUSY: BUSY,
    RejectKind.TOO_LONG: PROMPT_TOO_LONG,
    RejectKind.BAD_REQUEST: INVALID_PLAN,
    RejectKind.UNKNOWN_REQUEST: UNKNOWN_REQUEST,
    RejectKind.DUPLICATE: DUPLICATE_ID,
    RejectKind.INTERNAL: INTERNAL,
}


def wire_code(why: Rejection | None) -> str | None:
    """The "code" of an error event for a rejection (None: not a rejection)."""
    return None if why is None else WIRE_CODES[why.kind]


CLIENT_TYPES = ("hello", "complete", "cancel", "remask", "stats", "health")
STOP_KINDS = ("none", "line", "dedent", "brace", "blank_line")


class ProtocolError(ValueError):
    def __init__(self, code: str, message: str, request_id: str | None = None) -> None:
        super().__init__(message)
        self.code, self.request_id = code, request_id


@dataclass(frozen=True)
class Hello:
    protocol: int = PROTOCOL_VERSION
    token: str | None = None
    client: str = ""
    ref: str | None = None


@dataclass(frozen=True)
class Complete:
    request: CompletionRequest
    deadline_ms: int | None = None
    model: str | None = None


@dataclass(frozen=True)
class Cancel:
    request_id: str


@dataclass(frozen=True)
class Remask:
    request_id: str
    spans: list[tuple[int, int]] = field(default_factory=list)


@dataclass(frozen=True)
class Query:
    """stats or health: answered at once with a message of the same type."""

    type: str
    ref: str | None = None


Message = Hello | Complete | Cancel | Remask | Query


def _str(d: dict[str, Any], key: str, *, required: bool = False, default: str = "",
         limit: int | None = None, rid: str | None = None) -> str:
    v = d.get(key, None)
    if v is None:
        if required:
            raise ProtocolError(BAD_MESSAGE, f"field {key!r} is required", rid)
        return default
    if not isinstance(v, str):
        raise ProtocolError(BAD_MESSAGE, f"field {key!r} must be a string", rid)
    if limit is not None and len(v) > limit:
        raise ProtocolError(BAD_MESSAGE, f"field {key!r} is longer than {limit} characters", rid)
    return v


def _int(v: Any, name: str, lo: int, hi: int, rid: str | None) -> int:
    if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
        raise ProtocolError(INVALID_PLAN if name.startswith("plan.") else BAD_MESSAGE,
                            f"{name} must be an integer in [{lo}, {hi}], got {v!r}", rid)
    return v


def parse_plan(d: Any, rid: str | None, max_tokens: int = 1024) -> Plan:
    if d is None:
        return Plan()
    if not isinstance(d, dict):
        raise ProtocolError(INVALID_PLAN, "plan must be an object", rid)
    try:
        plan = Plan.from_json(d)
    except (TypeError, ValueError) as e:
        raise ProtocolError(INVALID_PLAN, f"invalid plan: {e}", rid) from e
    _int(plan.max_tokens, "plan.max_tokens", 1, max_tokens, rid)
    _int(plan.max_lines, "plan.max_lines", 0, 10_000, rid)
    if plan.alternatives is not None:
        _int(plan.alternatives, "plan.alternatives", 1, MAX_ALTERNATIVES, rid)
    if plan.stop not in STOP_KINDS:
        raise ProtocolError(INVALID_PLAN, f"plan.stop must be one of {STOP_KINDS}, got {plan.stop!r}", rid)
    for name in ("indent", "first_token_prefix"):
        if not isinstance(getattr(plan, name), str):
            raise ProtocolError(INVALID_PLAN, f"plan.{name} must be a string", rid)
    if not isinstance(plan.keep_closer, bool):
        raise ProtocolError(INVALID_PLAN, "plan.keep_closer must be a boolean", rid)
    if plan.preset is not None and not isinstance(plan.preset, str):
        raise ProtocolError(INVALID_PLAN, "plan.preset must be a string or null", rid)
    return plan


def parse_context(v: Any, rid: str | None) -> tuple[ContextChunk, ...]:
    """A `complete` message's workspace context: a list of {"path", "text"} objects (strings),
    at most MAX_CONTEXT_CHUNKS of them and MAX_CONTEXT_CHARS characters in all."""
    if v is None:
        return ()
    if not isinstance(v, list):
        raise ProtocolError(BAD_MESSAGE, "field 'context' must be a list of {path, text} objects", rid)
    if len(v) > MAX_CONTEXT_CHUNKS:
        raise ProtocolError(BAD_MESSAGE, f"field 'context' has {len(v)} chunks; at most {MAX_CONTEXT_CHUNKS}", rid)
    chunks: list[ContextChunk] = []
    total = 0
    for i, c in enumerate(v):
        if not isinstance(c, dict) or set(c) - {"path", "text"}:
            raise ProtocolError(BAD_MESSAGE, f"context[{i}] must be an object with the fields path and text", rid)
        path, text = c.get("path"), c.get("text")
        if not isinstance(path, str) or not isinstance(text, str):
            raise ProtocolError(BAD_MESSAGE, f"context[{i}].path and context[{i}].text must be strings", rid)
        total += len(path) + len(text)
        if total > MAX_CONTEXT_CHARS:
            raise ProtocolError(BAD_MESSAGE, f"field 'context' holds more than {MAX_CONTEXT_CHARS} characters", rid)
        chunks.append(ContextChunk(clean_text(path), clean_text(text)))
    return tuple(chunks)


def parse(raw: str | bytes, max_tokens: int = 1024) -> Message:
    """One client frame -> a message. Raises ProtocolError (code, message, request id)."""
    if isinstance(raw, bytes):
        raise ProtocolError(BAD_MESSAGE, "binary frames are not supported: send JSON text")
    try:
        d = json.loads(raw)
    except ValueError as e:
        raise ProtocolError(BAD_JSON, f"malformed JSON: {e}") from e
    except RecursionError as e:  # nested deeper than the parser goes: the peer's error, not ours
        raise ProtocolError(BAD_JSON, "malformed JSON: nested too deeply") from e
    if not isinstance(d, dict):
        raise ProtocolError(BAD_MESSAGE, "a message must be a JSON object")
    kind = d.get("type")
    rid_raw = d.get("id")
    rid = rid_raw if isinstance(rid_raw, str) else None
    if not isinstance(kind, str):
        raise ProtocolError(BAD_MESSAGE, "field 'type' (a string) is required", rid)
    ref = d.get("ref") if isinstance(d.get("ref"), str) else None  # echoed by hello, stats, health
    if kind == "hello":
        ver = d.get("protocol", PROTOCOL_VERSION)
        if ver != PROTOCOL_VERSION:
            raise ProtocolError(UNSUPPORTED_VERSION,
                                f"protocol {ver!r} is not supported; this daemon speaks {PROTOCOL_VERSION}")
        return Hello(PROTOCOL_VERSION, d.get("token") if isinstance(d.get("token"), str) else None,
                     _str(d, "client", limit=200), ref)
    if kind in ("stats", "health"):
        return Query(kind, ref)
    if kind not in CLIENT_TYPES:
        raise ProtocolError(UNKNOWN_TYPE, f"unknown message type {kind!r}; known: {list(CLIENT_TYPES)}", rid)
    request_id = _str(d, "id", required=True, limit=MAX_ID_CHARS)
    if not request_id:
        raise ProtocolError(BAD_MESSAGE, "field 'id' must not be empty")
    if kind == "cancel":
        return Cancel(request_id)
    if kind == "remask":
        spans = d.get("spans")
        if not isinstance(spans, list) or not all(
                isinstance(s, list) and len(s) == 2 and all(isinstance(x, int) and not isinstance(x, bool) for x in s)
                and 0 <= s[0] <= s[1] for s in spans):
            raise ProtocolError(BAD_MESSAGE, "field 'spans' must be a list of [start, end] character offsets",
                                request_id)
        return Remask(request_id, [(int(s[0]), int(s[1])) for s in spans])
    doc = _str(d, "doc", required=True, limit=4096, rid=request_id)
    prefix = clean_text(_str(d, "prefix", rid=request_id))  # the tokenizer takes valid text only
    suffix = clean_text(_str(d, "suffix", rid=request_id))
    deadline = d.get("deadline_ms")
    if deadline is not None:
        deadline = _int(deadline, "deadline_ms", 1, 3_600_000, request_id)
    model = d.get("model")
    if model is not None and not isinstance(model, str):
        raise ProtocolError(BAD_MESSAGE, "field 'model' must be a string", request_id)
    plan = parse_plan(d.get("plan"), request_id, max_tokens)
    context = parse_context(d.get("context"), request_id)
    try:  # known names for the identifier at the cursor (engine.api.Names)
        names = Names.from_json(d["names"]) if d.get("names") is not None else None
    except ValueError as e:
        raise ProtocolError(BAD_MESSAGE, str(e), request_id) from e
    return Complete(CompletionRequest(request_id, doc, prefix, suffix, plan, context, names), deadline, model)


# -- server -> client ----------------------------------------------------------------------
def event_message(ev: EngineEvent, code: str | None = None) -> dict[str, Any]:
    """An engine event as a wire message: {"type": kind, "id": request id, ...}."""
    d = ev.to_json()
    d["type"] = d.pop("kind")
    d["id"] = d.pop("request_id")
    if ev.kind == "error":
        d["code"] = code or INTERNAL
    return d


def error_message(code: str, message: str, request_id: str | None = None) -> dict[str, Any]:
    return {"type": "error", "id": request_id, "code": code, "error": message, "text": ""}


def event_from_message(d: dict[str, Any]) -> EngineEvent:
    """The client side of `event_message` (draft, edit, done or error); unknown fields are
    ignored (an older daemon's `edits`, too)."""
    err = d.get("error")
    if d["type"] == "error" and d.get("code"):
        err = f"{d['code']}: {err}"
    return EngineEvent(d["type"], str(d.get("id") or ""), str(d.get("text") or ""),
                       step=int(d.get("step") or 0), draft_complete=bool(d.get("draft_complete")),
                       reason=d.get("reason"), error=err, stats=d.get("stats"),
                       alternatives=tuple(str(t) for t in d.get("alternatives") or ()))


def complete_message(req: CompletionRequest, deadline_ms: int | None = None,
                     model: str | None = None) -> dict[str, Any]:
    d: dict[str, Any] = {"type": "complete", "id": req.request_id, "doc": req.doc_key,
                         "prefix": req.prefix, "suffix": req.suffix, "plan": req.plan.to_json()}
    if req.context:
        d["context"] = [{"path": c.path, "text": c.text} for c in req.context]
    if req.names is not None:
        d["names"] = req.names.to_json()
    if deadline_ms is not None:
        d["deadline_ms"] = deadline_ms
    if model is not None:
        d["model"] = model
    return d


def dumps(d: dict[str, Any]) -> str:
    """One frame's text; always encodable as UTF-8: a string holding a lone surrogate (from a
    client's `\\udXXX` escape, say) goes out as a JSON escape instead of breaking the frame."""
    text = json.dumps(d, ensure_ascii=False, separators=(",", ":"))
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(d, ensure_ascii=True, separators=(",", ":"))
    return text


def clean_text(s: str) -> str:
    """`s` with each lone surrogate replaced by U+FFFD (same length: character offsets hold)."""
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return "".join("\ufffd" if 0xD800 <= ord(c) <= 0xDFFF else c for c in s)
    return s
