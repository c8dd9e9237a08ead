"""The scheduler of the FAKE SGLang server (`tests.fakes.sglang` is the server, its HTTP side):
the waiting queue and the running rows, batched rounds that prefill or commit a block each, the
abort rules. What each step follows in sglang 0.5.23 is written in `tests.fakes.sglang`'s
docstring (the row rules in `tests.fakes.sglang_rows`).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.fakes.sglang_contract import sampling_params, stop_strings
from tests.fakes.sglang_rows import (
    Row,
    Timing,
    abort_reason,
    chunk,
    commit_round,
    holds_stop_prefix,
    waiting_abort_chunk,
)

Generator = Callable[[list[int], dict[str, Any]], list[int]]



@dataclass
class AbortRecord:
    t: float  # time.perf_counter() at arrival
    rid: str
    abort_all: bool
    matched: list[str] = field(default_factory=list)
    dropped: str = ""  # why the tokenizer manager did not forward it ("" when it did)


class Codec:
    """Text <-> ids with the checkpoint tokenizer, or one id per character without one."""

    def __init__(self, tokenizer_dir: str | Path | None) -> None:
        self.tok: Any = None
        if tokenizer_dir is not None:
            from tokenizers import Tokenizer

            self.tok = Tokenizer.from_file(str(Path(tokenizer_dir) / "tokenizer.json"))

    def encode(self, text: str) -> list[int]:
        return list(self.tok.encode(text, add_special_tokens=False).ids) if self.tok else [ord(c) for c in text]

    def decode(self, ids: list[int]) -> str:
        return self.tok.decode(ids, skip_special_tokens=True) if self.tok else "".join(map(chr, ids))

    def token_id(self, token: str) -> int | None:
        return self.tok.token_to_id(token) if self.tok else None


class SglangScheduler:
    """The fake server's rows and rounds. Counters for tests: `aborted_rids` (rows ended by an
    abort), `abort_log` (every abort), `running_peak`, `rounds`, `timings[rid]`; `wait_for(pred)`
    awaits a state change."""

    def __init__(
        self,
        *,
        reply: str = "",
        reply_fn: Callable[[str], str] | None = None,
        generator: Generator | None = None,
        tokenizer: str | Path | None = None,
        end_token_id: int | None = None,
        block_size: int = 32,
        block_delay_ms: float = 40.0,
        prefill_delay_ms: float | None = None,
        max_running_requests: int | None = None,
        fdfo: bool = True,
        stall: Callable[[str, int], bool] | None = None,  # (rid, 1-based row round) -> unresolved
        incremental_streaming_output: bool = False,
        tokenizer_worker_num: int = 1,
    ) -> None:
        self.codec = Codec(tokenizer)
        self.reply, self.reply_fn, self.generator = reply, reply_fn, generator
        self.end_token_id = end_token_id
        self.block_size, self.block_delay_s = block_size, block_delay_ms / 1000.0
        # a prefill round is one forward over one prompt block; a decode round commits a block
        self.prefill_delay_s = (block_delay_ms if prefill_delay_ms is None else prefill_delay_ms) / 1000.0
        self.max_running = 1 if max_running_requests is None else max_running_requests
        self.fdfo, self.stall = fdfo, stall
        self.incremental = incremental_streaming_output
        self.tokenizer_worker_num = tokenizer_worker_num
        self.last_receive = time.perf_counter()  # `TokenizerManager.last_receive_tstamp`
        self.aborted_rids: list[str] = []
        self.abort_log: list[AbortRecord] = []
        self.running_peak = 0
        self.rounds = 0
        self.timings: dict[str, Timing] = {}
        self._waiting: deque[Row] = deque()
        self._running: list[Row] = []
        self._live: dict[str, Row] = {}
        self._changed = asyncio.Condition()
        self._work = asyncio.Event()
        self._loop_task: asyncio.Task[None] | None = None
        self._bg: set[asyncio.Task[Any]] = set()

    async def wait_for(self, pred: Callable[[], bool], timeout: float = 5.0) -> None:
        async with self._changed:
            await asyncio.wait_for(self._changed.wait_for(pred), timeout)

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    # ---- scheduling ----

    def _stop_ids(self, sp: dict[str, Any]) -> set[int]:
        ids = set(sp.get("stop_token_ids") or [])
        if self.end_token_id is not None:
            ids.add(self.end_token_id)  # the model's eos (`Req.eos_token_ids`)
        return ids

    async def _rounds(self) -> None:
        while True:
            await self._work.wait()
            while self._waiting and len(self._running) < self.max_running:
                row = self._waiting.popleft()
                row.timing.admitted = time.perf_counter()
                self._running.append(row)
            self.running_peak = max(self.running_peak, len(self._running))
            if not self._running:
                self._work.clear()
                continue
            # prefill rows first: while one prefills, decoding rows wait (`_process_dllm_batches`)
            prefill = [r for r in self._running if not r.prefilled]
            batch = prefill or list(self._running)
            await asyncio.sleep(self.prefill_delay_s if prefill else self.block_delay_s)  # one batched round
            self.rounds += 1
            for row in batch:
                if row.done or row not in self._running:
                    continue  # aborted during the forward
                stalled = self.fdfo and self.stall is not None and row.prefilled and self.stall(row.rid, row.rounds + 1)
                commit_round(row, self.block_size, bool(stalled), self._stop_ids(row.sp), self.codec.decode)
                self._emit(row)
            self.last_receive = time.perf_counter()
            await self._notify()

    def _emit(self, row: Row) -> None:
        """Streams the row's step (`OutputStreamer.stream_output`); without FDFO a step that
        committed nothing streams nothing (`process_batch_result_dllm` skips the output)."""
        if row.done:
            self._running.remove(row)
            self._finish(row, chunk(row, self.codec.decode, self.incremental))
        elif row.stream and not holds_stop_prefix(row, self.codec.decode):
            if row.out or self.fdfo:
                row.chunks.put_nowait(chunk(row, self.codec.decode, self.incremental))

    def _finish(self, row: Row, final: dict[str, Any]) -> None:
        row.timing.finished = time.perf_counter()
        if (row.finish or {}).get("type") == "abort":
            self.aborted_rids.append(row.rid)
        self._live.pop(row.rid, None)
        row.chunks.put_nowait(final)
        row.chunks.put_nowait(None)

    def _abort(self, rid: str, abort_all: bool) -> list[str]:
        """`Scheduler.abort_request`: prefix match over queued and running rows."""
        matched: list[str] = []
        for row in list(self._waiting):
            if abort_all or row.rid.startswith(rid):
                self._waiting.remove(row)
                self._finish(row, waiting_abort_chunk(row))
                matched.append(row.rid)
        for row in list(self._running):
            if not row.done and (abort_all or row.rid.startswith(rid)):
                # `dllm_manager.pop_aborted_reqs` + `send_abort_output`: a running dLLM row
                # sits in the dLLM manager between rounds and ends at once, with what it has
                row.finish = abort_reason()
                self._running.remove(row)
                self._finish(row, chunk(row, self.codec.decode, self.incremental))
                matched.append(row.rid)
        return matched

    def abort(self, rid: str = "", abort_all: bool = False) -> AbortRecord:
        """`TokenizerManager.abort_request` then the scheduler's; recorded in `abort_log`."""
        rec = AbortRecord(time.perf_counter(), rid, abort_all)
        self.abort_log.append(rec)
        if not abort_all and not rid:
            return rec
        if not abort_all:
            state = self._live.get(rid)
            if state is not None:
                if state.abort_sent:  # one abort per rid is forwarded
                    rec.dropped = "abort already sent"
                    return rec
                state.abort_sent = True
            elif self.tokenizer_worker_num == 1:
                rec.dropped = "unknown rid"
                return rec
        rec.matched = self._abort(rid, abort_all)
        return rec

    def _later_abort(self, row: Row, delay: float) -> None:
        async def run() -> None:
            await asyncio.sleep(delay)
            if row.rid in self._live and self._live[row.rid] is row:
                self.abort(row.rid)
                await self._notify()

        task = asyncio.create_task(run())
        self._bg.add(task)
        task.add_done_callback(self._bg.discard)

    def _make_row(self, body: dict[str, Any]) -> Row:
        sp = sampling_params(body)
        prompt = body["input_ids"] if body.get("input_ids") is not None else self.codec.encode(body["text"])
        if self.generator is not None:
            target = list(self.generator(list(prompt), sp))
        else:
            text = self.reply_fn(self.codec.decode(prompt)) if self.reply_fn else self.reply
            target = self.codec.encode(text) + ([self.end_token_id] if self.end_token_id is not None else [])
        rid = body.get("rid") or uuid.uuid4().hex
        return Row(rid, list(prompt), target, sp, bool(body.get("stream")), stop_strings(sp),
                   Timing(time.perf_counter()), prefill_left=len(prompt) // self.block_size)

    def _dispatch(self, row: Row) -> None:
        """The request reaches the scheduler's waiting queue (unless aborted meanwhile by a
        disconnect, or the server was stopped)."""
        if self._live.get(row.rid) is row:
            self._waiting.append(row)
            self._work.set()
