"""One request's row in the fake SGLang scheduler: block commits, stop rules, stream chunks.

A fake for tests and benches (`tests.fakes.sglang` is the server). What it follows in
sglang 0.5.23 (the wheel, `sglang/...`):

- Block-granular commit aligned to absolute positions:
  `srt/dllm/mixin/scheduler.py:SchedulerDllmMixin.process_batch_result_dllm` (FDFO path)
  keeps only the part of a block past the prompt (`next_token_ids[len_input - len_fill:]`),
  and `srt/dllm/mixin/req.py:ReqDllmMixin._update_block_offset_for_dllm` asserts block-aligned
  prefixes; so the first output block has `block_size - prompt_len % block_size` tokens.
  A prompt is prefilled one block per round first (`is_dllm_prefill`,
  `if len_fill <= len_input: continue`): `len(prompt) // block_size` rounds that commit
  nothing; the partial last block is decoded with the first output block. While any row
  prefills, a round is a prefill batch and decoding rows wait
  (`SchedulerDllmMixin._process_dllm_batches` tries prefill requests first).
- FDFO (`--dllm-fdfo`, on by default: `srt/arg_groups/fields/exec_.py:ExecDllm.dllm_fdfo`):
  a row whose block is unresolved (`accept_length == 0`) commits nothing that round, yet
  `stream_output(batch.reqs)` still runs for it and, with the default `stream_interval` 1
  (`srt/managers/scheduler_components/output_streamer.py:_GenerationStreamAccumulator.accept`),
  an empty delta is streamed. Prefill rounds stream the same empty chunk under FDFO.
- Finish rules over the whole accepted block: `srt/managers/schedule_batch.py:
  Req.update_finish_state`: a pending abort (`to_finish`) first, then stop strings
  (`_check_str_based_finish`: finished_len is the first token count whose text holds the stop),
  then stop tokens (`_check_token_based_finish`, skipped under `ignore_eos`; the stop token is
  kept in output_ids), then length. Reasons are `FINISH_MATCHED_STR/TOKEN.to_json`
  `{"type": "stop", "matched": ...}`, `FINISH_LENGTH` `{"type": "length", "length": n}`,
  `FINISH_ABORT` `{"type": "abort", "message": "Aborted", "status_code": None, "err_type": None}`.
- Text trimming: `srt/managers/detokenizer_manager.py:trim_matched_stop` (the text stops
  before a matched string, or before a matched stop token, unless `no_stop_trim`).
- While the text so far ends with a prefix of a stop string, nothing is streamed
  (`Req.check_match_stop_str_prefix`, called from `accept`).
- Chunk shape: `srt/managers/tokenizer_manager.py:_handle_batch_output` (cumulative `text`
  and `output_ids` unless `incremental_streaming_output`, then deltas) and its meta_info keys.
Not modelled: logprobs, hidden states, retractions, the radix cache (`cached_tokens` is 0).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

Decode = Callable[[list[int]], str]


@dataclass
class Timing:
    """perf_counter times of one request (None until it happens)."""

    arrival: float
    admitted: float | None = None
    first_chunk: float | None = None
    last_chunk: float | None = None
    finished: float | None = None


@dataclass
class Row:
    rid: str
    prompt: list[int]
    target: list[int]
    sp: dict[str, Any]
    stream: bool
    stops: list[str]
    timing: Timing
    out: list[int] = field(default_factory=list)
    finished_len: int | None = None
    finish: dict[str, Any] | None = None
    to_finish: dict[str, Any] | None = None
    prefill_left: int = 0  # prompt blocks still to prefill, one a round
    abort_sent: bool = False  # `ReqState.abort_sent`: the one abort of this rid was forwarded
    rounds: int = 0
    sent_ids: int = 0
    sent_text: str = ""
    chunks: asyncio.Queue[dict[str, Any] | None] = field(default_factory=asyncio.Queue)

    @property
    def prefilled(self) -> bool:
        return self.prefill_left == 0

    @property
    def done(self) -> bool:
        return self.finish is not None

    def kept_ids(self) -> list[int]:
        """output_ids through the stop (`Req.output_ids_through_stop`)."""
        return self.out if self.finished_len is None else self.out[: self.finished_len]


def abort_reason(message: str = "Aborted") -> dict[str, Any]:
    return {"type": "abort", "message": message, "status_code": None, "err_type": None}


def commit_round(row: Row, block_size: int, stalled: bool, stop_ids: set[int], decode: Decode) -> None:
    """Runs one scheduler round for `row`: a prefill, an unresolved (stalled) block, or a commit."""
    row.rounds += 1
    if row.prefill_left > 0:
        row.prefill_left -= 1
        return
    if stalled:
        return
    pos = len(row.prompt) + len(row.out)
    n = block_size - pos % block_size
    block = row.target[len(row.out) : len(row.out) + n]
    row.out.extend(block)
    _update_finish(row, len(block), stop_ids, decode)
    if row.finish is None and len(row.out) >= len(row.target):
        # The scripted reply ran out without a stop: the fake ends it as a length finish.
        row.finish = {"type": "length", "length": len(row.out)}


def _update_finish(row: Row, accepted: int, stop_ids: set[int], decode: Decode) -> None:
    if row.to_finish is not None:
        row.finish, row.to_finish = row.to_finish, None
        return
    max_new = row.sp["max_new_tokens"]
    start = len(row.out) - accepted
    if row.stops:
        text = decode(row.out)
        for stop in row.stops:
            if stop and stop in text:
                row.finish = {"type": "stop", "matched": stop}
                row.finished_len = next(
                    k for k in range(start + 1, len(row.out) + 1) if stop in decode(row.out[:k])
                )
                _cap(row, max_new)
                return
    if not row.sp["ignore_eos"]:
        for i, tok in enumerate(row.out[start:]):
            if tok in stop_ids:
                row.finish = {"type": "stop", "matched": tok}
                row.finished_len = start + i + 1
                _cap(row, max_new)
                return
    if max_new is not None and len(row.out) >= max_new:
        row.finish = {"type": "length", "length": max_new}
        row.finished_len = max_new


def _cap(row: Row, max_new: int | None) -> None:
    """`Req._cap_finished_len_at_max_new_tokens`."""
    if max_new is not None and row.finished_len is not None and row.finished_len > max_new:
        row.finish = {"type": "length", "length": max_new}
        row.finished_len = max_new


def row_text(row: Row, decode: Decode) -> str:
    """The detokenized text of the kept ids, trimmed at a matched stop (`trim_matched_stop`)."""
    ids = row.kept_ids()
    matched = (row.finish or {}).get("matched")
    no_trim = bool(row.sp.get("no_stop_trim"))
    if isinstance(matched, int) and ids and not no_trim:
        return decode(ids[:-1])
    text = decode(ids)
    if isinstance(matched, str):
        pos = text.find(matched)
        if pos >= 0:
            return text[: pos + len(matched)] if no_trim else text[:pos]
    return text


def holds_stop_prefix(row: Row, decode: Decode) -> bool:
    """`Req.check_match_stop_str_prefix` over the whole text (the real one looks at a tail)."""
    text = decode(row.out)
    for stop in row.stops:
        if not stop:
            continue
        if stop in text or any(text.endswith(stop[:i]) for i in range(1, len(stop) + 1)):
            return True
    return False


def chunk(row: Row, decode: Decode, incremental: bool, weight_version: str = "default") -> dict[str, Any]:
    """The dict `_handle_batch_output` yields for `row` now (the caller sends it)."""
    ids = row.kept_ids()
    text = row_text(row, decode)
    meta: dict[str, Any] = {
        "id": row.rid,
        "finish_reason": row.finish,
        "prompt_tokens": len(row.prompt),
        "weight_version": weight_version,
        "num_retractions": 0,
        "reasoning_tokens": 0,
        "completion_tokens": len(ids),
        "cached_tokens": 0,
    }
    if row.finish is not None:
        meta["e2e_latency"] = time.perf_counter() - row.timing.arrival
    if incremental and row.stream:
        delta_ids, delta_text = ids[row.sent_ids :], text[len(row.sent_text) :]
        row.sent_ids, row.sent_text = len(ids), text
        return {"text": delta_text, "output_ids": delta_ids, "meta_info": meta}
    return {"text": text, "output_ids": list(ids), "meta_info": meta}


def waiting_abort_chunk(row: Row) -> dict[str, Any]:
    """`TokenizerManager._handle_abort_req`: an abort of a row still in the waiting queue."""
    reason = {"type": "abort", "message": "Abort in waiting queue"}
    row.finish = reason
    meta = {
        "id": row.rid,
        "finish_reason": reason,
        "weight_version": "default",
        "e2e_latency": time.perf_counter() - row.timing.arrival,
        "completion_tokens": 0,
    }
    return {"text": "", "output_ids": [], "meta_info": meta}
