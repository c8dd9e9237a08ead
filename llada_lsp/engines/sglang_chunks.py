"""One SSE event of SGLang's `/generate` stream (0.5.23), checked field by field.

`parse_event` turns the JSON text of an event into a `Chunk` or raises `BadChunk` naming the
field that is wrong, so a malformed answer ends its request at once with a clear error instead
of an exception deep in the stream reader (and a request that ends only at its deadline).

The shapes are those of `srt/managers/tokenizer_manager.py:_handle_batch_output` (`text`,
`output_ids`, `meta_info` with `finish_reason`, `prompt_tokens`, `completion_tokens`,
`cached_tokens`) and of `srt/entrypoints/http_server.py:serve_generate_request` for an error
(`{"error": {"message": ...}}`). `Answer` gathers one stream's chunks into its token ids
and the done event's stats. No torch here.
"""

from __future__ import annotations

import json
import time
from collections.abc import Collection
from dataclasses import dataclass, field
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


@dataclass
class Answer:
    """One stream's answer so far: its token ids (chunks carry the cumulative ids, or deltas
    under `--incremental-streaming-output`), the blocks committed, when the first one came, and
    the last chunk (its counts go into the stats)."""

    ids: list[int] = field(default_factory=list)
    blocks: int = 0
    first_at: float | None = None  # perf_counter of the first committed block
    meta: Chunk | None = None

    def add(self, c: Chunk) -> bool:
        """Take a chunk; False when it commits nothing and does not finish (an empty FDFO delta)."""
        self.meta = c
        before = len(self.ids)
        out, n = c.output_ids, c.completion_tokens
        self.ids = self.ids + out if n is not None and self.ids and len(out) < n else out  # deltas or cumulative
        if len(self.ids) <= before and c.finish is None:
            return False
        if len(self.ids) > before:
            self.blocks += 1
            self.first_at = self.first_at or time.perf_counter()
        return True

    def stats(self, prompt_len: int, submitted_at: float, started_at: float | None, server: str | None,
              rid: str) -> dict[str, Any]:
        """What the server reports and what was timed here; forwards and tokens-per-forward are
        not reported by SGLang, so they are None (never estimated)."""
        now = time.perf_counter()
        sent = started_at or submitted_at
        meta = self.meta
        prompt_tokens = meta.prompt_tokens if meta and meta.prompt_tokens is not None else prompt_len
        cached = meta.cached_tokens if meta else None
        return {"tokens": len(self.ids), "blocks": self.blocks, "prompt_tokens": prompt_tokens,
                "cached_tokens": cached, "prefill_tokens": prompt_tokens - (cached or 0), "reused_tokens": cached or 0,
                "forwards": None, "tpf": None, "queue_ms": (sent - submitted_at) * 1000,
                "first_draft_ms": (self.first_at - submitted_at) * 1000 if self.first_at else None,
                "total_ms": (now - submitted_at) * 1000, "server": server, "rid": rid}
