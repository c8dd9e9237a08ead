"""One SSE event of SGLang's `/generate` stream (0.5.23), checked field by field.

`parse_event` turns the JSON text of an event into a `Chunk` or raises `BadChunk` naming the
field that is wrong, so a malformed answer ends its request at once with a clear error instead
of an exception deep in the stream reader (and a request that ends only at its deadline).

The shapes are those of `srt/managers/tokenizer_manager.py:_handle_batch_output` (`text`,
`output_ids`, `meta_info` with `finish_reason`, `prompt_tokens`, `completion_tokens`,
`cached_tokens`) and of `srt/entrypoints/http_server.py:serve_generate_request` for an error
(`{"error": {"message": ...}}`). No torch here.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

MAX_TOKEN_ID = 1 << 31  # far above any vocabulary; an id outside [0, this) is not a token


class BadChunk(ValueError):
    """An event the client cannot read; the message says which field and how."""


@dataclass(frozen=True)
class Chunk:
    output_ids: list[int]
    completion_tokens: int | None
    finish: dict[str, Any] | None
    prompt_tokens: int | None
    cached_tokens: int | None
    error: str | None = None  # the server refused the request inside the stream


def _int(meta: dict[str, Any], key: str) -> int | None:
    v = meta.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise BadChunk(f"meta_info.{key} is {v!r}, not a count")
    return v


def _error_text(err: Any) -> str:
    if isinstance(err, dict):
        err = err.get("message", err)
    return err if isinstance(err, str) else json.dumps(err)[:500]


def parse_event(data: str) -> Chunk:
    """The event's chunk; BadChunk when it is not JSON or a field has the wrong shape."""
    try:
        obj = json.loads(data)
    except ValueError as e:
        raise BadChunk(f"an event is not JSON ({e}): {data[:200]!r}") from e
    if not isinstance(obj, dict):
        raise BadChunk(f"an event is a {type(obj).__name__}, not an object: {data[:200]!r}")
    if obj.get("error") is not None:
        return Chunk([], None, None, None, None, error=_error_text(obj["error"])[:500])
    ids = obj.get("output_ids")
    if not isinstance(ids, list):
        raise BadChunk(f"output_ids is {type(ids).__name__}, not a list of token ids")
    for t in ids:
        if isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < MAX_TOKEN_ID:
            raise BadChunk(f"output_ids holds {t!r}, not a token id")
    meta = obj.get("meta_info")
    if not isinstance(meta, dict):
        raise BadChunk(f"meta_info is {type(meta).__name__}, not an object")
    finish = meta.get("finish_reason")
    if finish is not None and not (isinstance(finish, dict) and isinstance(finish.get("type"), str)):
        raise BadChunk(f"meta_info.finish_reason is {finish!r}, not an object with a type")
    return Chunk(list(ids), _int(meta, "completion_tokens"), finish, _int(meta, "prompt_tokens"),
                 _int(meta, "cached_tokens"))


def finish_reason(finish: dict[str, Any] | None, fired: bool, ids: list[int], end_ids: Collection[int]) -> str:
    """The done event's reason: SGLang's `finish_reason` (abort, length), an end token among
    `ids`, or the plan's stop rule that `fired` here."""
    kind = (finish or {}).get("type")
    if kind == "abort":
        return "cancelled"
    if any(t in end_ids for t in ids):
        return "end_of_middle"
    if fired:
        return "stop_rule"
    return "budget" if kind == "length" else "end_of_middle"
