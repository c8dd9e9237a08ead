"""The step loop: many requests, one batched forward per step (vLLM engine-core style). It is
the engine's only decode loop: the daemon runs one for its connections, the in-process engine
steps `TextEngine.loop()` in its torch thread, and `engine.decoding.local` drives it for one request.

One thread owns the model. Each iteration of its loop is
  schedule  - apply the inbox (new requests, cancels, remasks, dropped connections), in order,
              between forwards; expired deadlines end their requests. The loop decides no
              supersession: a client ends its older request of a document with a cancel
              (`llada_lsp.engines.engine_base.EngineClient.supersede`, the one rule);
  execute   - one forward over every running sequence, each on its own KV-cache row
              (`engine.decoding.batch.execute` packs or pads the ragged feeds); a new arrival's prompt
              prefill runs as a forward of its own;
  update    - the confidences of every row (`engine.decoding.batch.confidences`), then each
              sequence applies its policy, text events go out, finished rows are freed.
Rows are the concurrency limit: a request arriving with every row taken gets a "busy" error,
unless an alternative (`engine.decoding.alternatives`: forks that take free rows after a request's
first complete draft, its done event waiting for them) can give its row up. Work for a
cancelled or disconnected request stops before the next forward; a failure inside
one request (prepare, forward, update) fails that request only.

A request's `stats.forwards` counts every forward that carried any of its rows (its prefill,
steps, alternatives and remask passes) once (`engine.decoding.decode.Tally`, noted by `execute`). The
prompt cache holds exact KV only: a model with an approximate cache (LLaDA-8B, Dream: every
entry goes stale once the middle changes) neither stores nor restores entries. Rows, endings,
preemption and alternatives' rows are `engine.decoding.rows`.
A forward stopped between layers, or made slower by the test seam: `engine.decoding.interrupt`.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from collections.abc import Hashable
from dataclasses import replace
from typing import Any, Literal

from torch import Tensor

from engine.api import CompletionRequest, decided
from engine.decoding.alternatives import forks_budget
from engine.decoding.batch import confidences, execute, length_split, new_slot_attrs
from engine.decoding.decode import Feed, Staged
from engine.decoding.host import Host
from engine.decoding.interrupt import STEP_DELAY_ENV, Interrupted, Interrupter, injected_delay
from engine.decoding.jobs import Command, Emit, Job, Key
from engine.decoding.policies import POLICIES, PRESETS, Policy
from engine.decoding.rejections import Rejection, RejectKind, rejection_of
from engine.decoding.rows import FINISHED_KEPT, Rows, request_key
from engine.decoding.stream import TextStream
from engine.model.threads import ThreadGovernor
from kernels import Confidence

log = logging.getLogger(__name__)

__all__ = ["FINISHED_KEPT", "Job", "Scheduler"]


class Scheduler(Rows):
    def __init__(self, engine: Host, max_batch: int = 8, deadline_s: float = 30.0,
                 keep_finished: int = FINISHED_KEPT, prefill_split: int | None = None,
                 forward_cost_tokens: int | None = None, pack: bool | None = None,
                 threads: ThreadGovernor | None = None) -> None:
        if max_batch < 1:
            raise ValueError("max_batch must be >= 1")
        super().__init__(engine, max_batch, keep_finished)
        self.deadline_s = deadline_s
        self._claim_cache()
        b = engine.model.config.block_size
        self.prefill_split = prefill_split if prefill_split is not None else 2 * b
        # a forward's fixed cost in fed tokens: ~3 ms of dispatch against ~0.08 ms a token on
        # a 2-core CPU; on an accelerator a forward's launch cost dwarfs a few padded tokens
        if forward_cost_tokens is None:
            on_cpu = engine.model.output.weight.device.type == "cpu"
            forward_cost_tokens = 3 * b if on_cpu else 64 * b
        self.forward_cost_tokens = forward_cost_tokens
        # pack the step's decode feeds into one forward of block-sized pieces (engine.decoding.batch.execute)
        # instead of padding them or splitting them into two forwards; on by default on a CPU,
        # where padded tokens cost as much as real ones
        if pack is None:
            pack = engine.model.output.weight.device.type == "cpu"
        self.pack = pack
        self.inbox: queue.Queue[Command] = queue.Queue()
        self.delay_file = os.environ.get(STEP_DELAY_ENV) or None  # the test seam (module docstring)
        self.threads = threads  # re-checks torch's CPU threads between steps (engine.model.threads)
        # a forward whose every request was cancelled meanwhile stops between layers
        self.interrupter = Interrupter()
        self._cut_short = False  # this step's forward stopped early (not a step the governor measures)
        self.started = time.time()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- thread-safe entry points --------------------------------------------------------------
    def submit(self, req: CompletionRequest, owner: Hashable, emit: Emit, deadline_ms: int | None = None,
               op: Literal["complete", "remask"] = "complete", spans: list[tuple[int, int]] | None = None,
               policy: Policy | None = None) -> None:
        """Queue a request; `policy` overrides its plan's preset (benches compare policies)."""
        limit = self.deadline_s if deadline_ms is None else min(self.deadline_s, deadline_ms / 1000)
        req = replace(req, plan=decided(req.plan, self.engine.preset))  # its preset and candidates, once
        job = Job(req, owner, emit, time.perf_counter() + limit, op=op, spans=list(spans or []), policy=policy)
        self.inbox.put(Command("submit", job=job))

    def remask(self, request_id: str, spans: list[tuple[int, int]], owner: Hashable, emit: Emit,
               deadline_ms: int | None = None) -> None:
        """Re-decode the characters `spans` of a finished request's text (same request id)."""
        stub = CompletionRequest(request_id, "", "", "")
        self.submit(stub, owner, emit, deadline_ms, op="remask", spans=spans)

    def cancel(self, request_id: str, owner: Hashable) -> None:
        """The request stops before its next forward, or between two layers of the one running
        when nothing else rides on it (`engine.decoding.interrupt`)."""
        self.interrupter.cancel((owner, request_id))
        self.inbox.put(Command("cancel", key=(owner, request_id)))

    def drop_owner(self, owner: Hashable) -> None:
        """A connection went away: its running requests stop before the next forward (or in it)."""
        self.interrupter.drop(owner)
        self.inbox.put(Command("drop", owner=owner))

    def snapshot(self) -> dict[str, Any]:
        c = dict(self.counters)
        forks = sum(j.parent is not None for j in self.running.values())
        return {"running": len(self.running) - forks, "alternative_rows": forks,
                "free_rows": len(self.free_rows), "max_batch": self.max_batch,
                "queued_messages": self.inbox.qsize(), "uptime_s": time.time() - self.started,
                "avg_batch": c["batched_rows"] / max(1, c["forwards"]), **c}

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="llada-scheduler", daemon=True)
        self._thread.start()

    def run(self) -> None:
        """The loop on the calling thread until `request_stop`, then every running request is
        cancelled. The daemon runs it on the process's main thread: on 2 CPU cores a forward
        with two torch threads issued from any other thread measured ~1.6x slower (BENCHMARKS.md)."""
        self._loop()
        for job in list(self.running.values()):
            self._finish(job, "cancelled")
        self._stop.clear()  # the loop may be run again (a new in-process client on this engine)

    def request_stop(self) -> None:
        """Thread-safe: the loop (`run` or the thread of `start`) ends after its current step."""
        self._stop.set()
        self.inbox.put(Command("wake"))

    def stop(self, timeout: float = 10.0) -> None:
        self.request_stop()
        if self._thread is not None:
            self._thread.join(timeout)
            for job in list(self.running.values()):
                self._finish(job, "cancelled")

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.step(block=True)

    def _claim_cache(self) -> None:
        """Size the model's KV cache for this loop's rows (again, when another loop on the same
        engine resized it between two of this one's steps)."""
        model, n = self.engine.model, self.engine.max_len
        if model.cache_batch < self.max_batch or getattr(model, "cache_len", n) != n:
            model.setup_cache(self.max_batch, n)

    # -- one iteration -------------------------------------------------------------------------
    def step(self, block: bool = False) -> int:
        """schedule, execute, update; returns how many sequences advanced (0: idle)."""
        waits = block and not self.running
        self._drain(waits)
        self._claim_cache()
        jobs = self._schedule()
        if not jobs:
            return 0
        if waits and self.threads is not None:
            self.threads.idle()  # the wait for work is no part of the steps' CPU share
        t0 = self.threads.clock() if self.threads is not None else 0.0
        self._cut_short = False
        results = self._execute(jobs)
        self._update(jobs, results)
        if self.threads is not None:  # a forward stopped between layers measures nothing
            self.threads.skip(t0) if self._cut_short else self.threads.step()
        return len(results)

    def _drain(self, block: bool) -> None:
        while True:
            try:
                cmd = self.inbox.get(timeout=0.25) if block else self.inbox.get_nowait()
            except queue.Empty:
                return
            block = False
            self._apply(cmd)

    def _apply(self, cmd: Command) -> None:
        if cmd.op == "cancel" and cmd.key is not None:
            job = self.running.get(cmd.key)
            if job is not None:
                self._finish(job, "cancelled")
            self.interrupter.applied(cmd.key)
        elif cmd.op == "drop":
            self.interrupter.dropped(cmd.owner)
            for job in [j for j in self.running.values() if j.owner == cmd.owner]:
                self._finish(job, "cancelled")
            for key in [k for k in self.finished if k[0] == cmd.owner]:
                del self.finished[key]
            self.engine.prompt_cache.drop_owner(cmd.owner)
        elif cmd.op == "submit" and cmd.job is not None:
            self._admit(cmd.job)

    def _admit(self, job: Job) -> None:
        self.counters["submitted"] += 1
        rid = job.req.request_id
        if job.key in self.running:
            return self._reject(job, Rejection(RejectKind.DUPLICATE, f"request {rid!r} is already running"))
        old: Job | None = None
        if job.op == "remask":
            old = self.finished.pop(job.key, None)
            if old is None or old.seq is None:
                return self._reject(job, Rejection(RejectKind.UNKNOWN_REQUEST,
                                                   f"unknown or expired request id {rid!r}"))
            job.req, job.partial = old.req, old.partial
        preset = job.preset
        if job.policy is None and preset is not None and preset not in PRESETS and preset not in POLICIES:
            return self._reject(job, Rejection(RejectKind.BAD_REQUEST, f"unknown preset {preset!r}; known: "
                                               f"{sorted(set(PRESETS) | set(POLICIES))}"))
        if not self.free_rows:
            self._preempt_fork()
        if not self.free_rows:
            self._preempt_for(job.owner)
        if not self.free_rows:
            self.counters["busy"] += 1
            return self._reject(job, Rejection(RejectKind.BUSY,
                                               f"busy: {self.max_batch} requests are running; retry later"))
        row = self.free_rows.pop()
        try:
            if old is not None and old.seq is not None:
                seq = old.seq
                seq.row = row
                reused = self.engine.prompt_cache.restore(self.engine.model, row, job.req.doc_key, seq.prompt,
                                                          owner=job.owner) if self.engine.exact_cache else 0
                seq.remask(self.engine.positions_for(seq, job.partial, job.spans), reused)
            else:
                with self.engine.prompt_cache.scoped(job.owner):  # its own prompts only
                    seq, job.partial, reused = self.engine.prepare(job.req, row, job.policy)
        except Exception as e:  # noqa: BLE001 - a bad request fails alone
            self.free_rows.append(row)
            self.free_rows.sort(reverse=True)
            log.exception("request %s failed to start", rid)
            return self._reject(job, rejection_of(e))
        job.seq, job.row = seq, row
        queue_ms = (time.perf_counter() - job.submitted) * 1000
        seq.keep_first_logits = job.op == "complete" and (job.req.plan.alternatives or 1) > 1
        job.stream = TextStream(self.engine, job.req, seq, job.partial, job.submitted, reused, queue_ms)
        job.attrs = new_slot_attrs(self.engine.max_len, seq.clean_len)
        self.running[job.key] = job
        return None

    def _schedule(self) -> list[Job]:
        now = time.perf_counter()
        for job in [j for j in self.running.values() if now > j.deadline]:
            self._finish(job, "deadline")
        steps = self.counters["steps"]
        for job in list(self.running.values()):  # a done request waiting for its forks
            if job.last_step is not None and (steps >= job.last_step or
                                              not any(f.key in self.running for f in job.forks)):
                self._finish(job, None)
        return [j for j in self.running.values() if j.last_step is None]

    def _execute(self, jobs: list[Job]) -> dict[Key, Tensor]:
        feeds: list[tuple[Job, Feed]] = []
        for job in jobs:
            assert job.seq is not None
            try:
                feeds.append((job, job.seq.prepare()))
            except Exception as e:  # noqa: BLE001
                self._fail(job, e)
        long = [(j, f) for j, f in feeds if len(f.ids) > self.prefill_split]
        short = [(j, f) for j, f in feeds if len(f.ids) <= self.prefill_split]
        out: dict[Key, Tensor] = {}
        # prefills run one per forward: padding ragged prompts to the longest costs more
        # than it saves (compute-bound); decode feeds are grouped by length (see _groups)
        for group in self._groups(short) + [[item] for item in long]:
            out.update(self._forward(group))
        self.counters["steps"] += 1
        return out

    def _groups(self, feeds: list[tuple[Job, Feed]]) -> list[list[tuple[Job, Feed]]]:
        """The decode feeds, sorted by length, in one forward or two (`engine.decoding.batch.length_split`)."""
        if len(feeds) < 2 or self.pack:
            return [feeds] if feeds else []
        feeds = sorted(feeds, key=lambda jf: len(jf[1].ids))
        i = length_split([len(f.ids) for _, f in feeds], self.forward_cost_tokens)
        return [feeds[:i], feeds[i:]] if i else [feeds]

    def _forward(self, group: list[tuple[Job, Feed]]) -> dict[Key, Tensor]:
        group = sorted(group, key=lambda jf: jf[0].row)  # rows 0..B-1 in order: the cache is read by slicing
        seqs = [j.seq for j, _ in group if j.seq is not None]
        t0 = time.perf_counter()
        try:
            attrs = [j.attrs for j, _ in group if j.attrs is not None]
            chunk = self.engine.model.config.block_size if self.pack and len(group) > 1 else 0
            # a prefill whose prompt the cache stores runs whole: the document's next request reuses it
            prefill = any(len(f.ids) > self.prefill_split and self._stores_prompt(j) for j, f in group)
            carried = [] if prefill else [request_key(j) for j, _ in group]
            with self.interrupter.watching(self.engine.model, carried):
                logits = execute(self.engine.model, seqs, [f for _, f in group], attrs, chunk=chunk)
            injected_delay(self.delay_file)
        except Interrupted:  # every request it carried was cancelled: their cancels follow
            self.counters["interrupted"] += 1
            self._cut_short = True
            return {}
        except Exception as e:  # noqa: BLE001 - find the request that breaks the batch
            if len(group) == 1:
                self._fail(group[0][0], e)
                return {}
            out: dict[Key, Tensor] = {}
            for item in group:
                out.update(self._forward([item]))
            return out
        c = self.counters
        c["forward_ms"] += (time.perf_counter() - t0) * 1000
        c["forwards"] += 1
        c["batched_rows"] += len(group)
        c["max_batch_seen"] = max(c["max_batch_seen"], len(group))
        for j, _ in group:
            j.batch_sum += len(group)
        return {j.key: lg for (j, _), lg in zip(group, logits, strict=True)}

    def _update(self, jobs: list[Job], results: dict[Key, Tensor]) -> None:
        """Every row's policy step, from the confidences of all the step's rows."""
        staged: list[tuple[Job, Staged, bool]] = []
        for job in jobs:
            logits = results.get(job.key)
            if logits is None or self.running.get(job.key) is not job:
                continue
            if self.interrupter.cancelled(request_key(job)):  # its cancel waits in the inbox:
                if self._stores_prompt(job):  # its prompt is kept, its update would be thrown away
                    self._store_prompt(job)
                continue
            assert job.seq is not None
            first = job.seq.forwards == 0 and job.op != "remask" and job.parent is None
            try:
                staged.append((job, job.seq.stage(logits), first))
            except Exception as e:  # noqa: BLE001
                self._fail_row(job, e)
        for (job, st, first), conf in zip(staged, confidences([st for _, st, _ in staged]), strict=True):
            if isinstance(conf, Exception):
                self._fail_row(job, conf)
            elif self.running.get(job.key) is not job:
                continue
            elif job.parent is not None:
                self._update_fork(job, st, conf)
            else:
                self._update_primary(job, st, conf, first)

    def _update_primary(self, job: Job, st: Staged, conf: Confidence, first: bool) -> None:
        seq, stream = job.seq, job.stream
        assert seq is not None and stream is not None
        try:
            tev = seq.commit(st, conf)
            if first:
                self._store_prompt(job)
            if not job.spawned and job.op == "complete" and (tev.complete or seq.done()):
                job.spawned = True  # after the first complete draft: the forks do not slow it
                self._spawn_forks(job)
            ev = stream.feed(tev)
            if ev is not None:
                job.emit(ev, None)
            if seq.done() and any(f.key in self.running for f in job.forks):
                job.last_step = int(self.counters["steps"]) + forks_budget(seq)
            elif seq.done():
                self._finish(job, None)
        except Exception as e:  # noqa: BLE001
            self._fail(job, e)

    def _update_fork(self, fork: Job, st: Staged, conf: Confidence) -> None:
        assert fork.seq is not None
        try:
            fork.seq.commit(st, conf)
        except Exception as e:  # noqa: BLE001 - an alternative that fails is dropped, the request goes on
            self._fail_row(fork, e)
            return
        if fork.seq.done():
            self._release(fork)
