"""Frames for fuzzing the daemon protocol: hypothesis strategies for arbitrary JSON, and
mutations of valid frames (fields dropped, retyped or added, truncated or byte-flipped text,
lone surrogates, huge frames, binary frames, unknown types, out-of-order hello, floods).

One `Case` is what one connection sends: how it authenticates, its frames, and the close
codes the daemon may answer it with (anything else is an unexpected disconnect)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st

TOKEN = "fuzz-token"
MAX_MESSAGE = 16_384  # the fuzzed daemon's --max-message-bytes (frames above 4x close with 1009)
PREFIX = "def fibonacci(n):\n    if n < 2:\n        return n\n    "
SURROGATES = ["\ud800", "\udfff", "a\udc80b", "\ud83d", "x\ude00"]
KINDS = ["hello", "complete", "complete", "complete", "cancel", "remask", "health", "stats"]
MUTATIONS = ["valid", "valid", "drop_field", "retype", "add_field", "plan_field", "truncate", "byteflip",
             "surrogate", "huge", "binary", "unknown_type", "random_json", "garbage", "flood"]


@dataclass
class Frame:
    data: str | bytes
    text: bool = True  # bytes sent as a text frame: not valid UTF-8 (websockets closes with 1007)


@dataclass
class Case:
    auth: str  # "header" (Authorization at the handshake), "hello" (hello first) or "none"
    frames: list[Frame] = field(default_factory=list)
    allowed_closes: set[int] = field(default_factory=set)


leaves = (st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=True)
          | st.text(max_size=30) | st.sampled_from(SURROGATES))
json_values = st.recursive(leaves, lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=12), c,
                                                                                           max_size=4),
                           max_leaves=10)


def valid(kind: str, n: int) -> dict[str, Any]:
    rid = f"r{n % 5}"  # few ids: cancels, remasks and duplicates meet running requests
    return {
        "hello": {"type": "hello", "protocol": 1, "token": TOKEN, "client": "fuzz", "ref": f"h{n}"},
        "complete": {"type": "complete", "id": rid, "doc": f"d{n % 3}", "prefix": PREFIX, "suffix": "\n",
                     "plan": {"max_tokens": 4, "stop": "line"}, "deadline_ms": 5000},
        "cancel": {"type": "cancel", "id": rid},
        "remask": {"type": "remask", "id": rid, "spans": [[0, 2]]},
        "health": {"type": "health", "ref": f"q{n}"},
        "stats": {"type": "stats", "ref": f"s{n}"},
    }[kind]


def dumps(d: Any) -> str:
    return json.dumps(d)  # ensure_ascii: lone surrogates travel as escapes


@st.composite
def mutated(draw: st.DrawFn, n: int) -> tuple[list[Frame], set[int]]:
    """One mutated valid frame (a flood: many); the close codes it may legitimately cause."""
    msg = valid(draw(st.sampled_from(KINDS)), n)
    how = draw(st.sampled_from(MUTATIONS))
    keys = sorted(msg)
    if how == "drop_field":
        del msg[draw(st.sampled_from(keys))]
    elif how == "retype":
        msg[draw(st.sampled_from(keys))] = draw(json_values)
    elif how == "add_field":
        msg[draw(st.text(max_size=12))] = draw(json_values)
    elif how == "plan_field":
        msg["plan"] = {draw(st.sampled_from(["max_tokens", "stop", "indent", "max_lines", "keep_closer", "preset",
                                             "first_token_prefix", "alternatives", "bogus"])): draw(json_values)}
    elif how == "surrogate":
        msg[draw(st.sampled_from(keys))] = draw(st.sampled_from(SURROGATES))
    elif how == "unknown_type":
        msg["type"] = draw(st.text(max_size=12))
    elif how == "huge":
        size = draw(st.integers(MAX_MESSAGE - 200, 5 * MAX_MESSAGE))
        msg[draw(st.sampled_from(keys))] = "x" * size
        return [Frame(dumps(msg))], {1009}
    text = dumps(msg)
    if how == "truncate":
        return [Frame(text[: draw(st.integers(0, max(0, len(text) - 1)))])], set()
    if how == "byteflip":
        raw = bytearray(text.encode())
        raw[draw(st.integers(0, len(raw) - 1))] ^= 1 << draw(st.integers(0, 7))
        try:
            return [Frame(raw.decode())], set()
        except UnicodeDecodeError:
            return [Frame(bytes(raw))], {1007}
    if how == "binary":
        return [Frame(draw(st.binary(max_size=64)) or text.encode(), text=False)], set()
    if how == "random_json":
        return [Frame(dumps(draw(json_values)))], set()
    if how == "garbage":
        return [Frame(draw(st.text(max_size=80)))], set()
    if how == "flood":
        return [Frame(text)] * draw(st.integers(20, 120)), set()
    return [Frame(text)], set()


@st.composite
def cases(draw: st.DrawFn) -> Case:
    auth = draw(st.sampled_from(["header", "header", "hello", "none"]))
    case = Case(auth)
    if auth == "hello":
        case.frames.append(Frame(dumps(valid("hello", 0))))
    elif auth == "none":  # before authenticating: a few answers, then closed (1008), or too big (1009)
        case.allowed_closes |= {1008}
    for n in range(draw(st.integers(1, 12))):
        frames, closes = draw(mutated(n))
        case.frames += frames
        case.allowed_closes |= closes
    if auth == "none":
        if any(len(f.data) > 16_384 for f in case.frames):
            case.allowed_closes.add(1009)  # the pre-auth frame limit
        case.frames.append(Frame(dumps(valid("hello", 99))))  # out of order: authenticate at the end
    return case
