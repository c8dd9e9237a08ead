"""The server's side of the next-edit worker process (`llada_lsp.nextedit.edit_worker`).

`EditProcess` starts the worker as every child Python of the project starts
(`engine.daemon.child`: `-P -s`, a safe `PYTHONPATH`, the runtime dir as its working
directory, so no file of the workspace can run in it), at the first edit of a served document
(`warm`) or the first request. On the event loop a request costs a comparison of its texts
with those the worker holds (memcmp speed) and a `json.dumps` of what changed; a thread writes
them to the worker's stdin and another reads its answers, so the loop never
waits on the pipe, and no tree-sitter work of next-edit holds this process's GIL. The worker
keeps its own copy of each document's texts in step (`edit_texts`), so a request ships ids and
the edit's middle, not the file.

A request is cancelled by its `Guard` (a newer request, an edit, `$/cancelRequest`): the
awaiting coroutine ends at once with `Cancelled`, and the worker is told to stop (`cancel`).
A worker that fails a request or ends answers that request empty with the reason
(`WorkerFailed`); the next request starts a new worker. Its memory is bounded: each answer
says its resident bytes, and past `MAX_WORKER_RSS` the service ends it once no request is
running (`bound`); the next request starts a new one.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import queue
import subprocess
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO, Any

from engine.daemon import child, runtime
from llada_lsp.nextedit.edit_analysis import Analysis
from llada_lsp.nextedit.edit_limits import Cancelled, Guard
from llada_lsp.nextedit.edit_syntax import Site
from llada_lsp.nextedit.edit_texts import Texts
from llada_lsp.nextedit.edit_window import Suggested
from llada_lsp.nextedit.next_edit_work import Base, Snapshot

log = logging.getLogger(__name__)

WORKER = "llada_lsp.nextedit.edit_worker"
# The worker's resident memory past which it is restarted between requests (`bound`): its trees
# of a 500 KB file and the analysis of a 1,000-site edit peak near 300 MiB; a new worker costs a
# parse of the next request's texts (sent whole to it).
MAX_WORKER_RSS = 512 << 20


class WorkerFailed(Cancelled):
    """The worker failed the request or ended: the request answers empty with the reason."""


@dataclass
class Analysed:
    """The worker's analysis of one request (`next_edit_work.Analysed`, without the tree:
    the worker keeps it until the request's check)."""

    analysis: Analysis
    errors: int
    settles: bool
    rid: int


def _analysis(d: dict[str, Any]) -> Analysis:
    sites = tuple(Site(a, b, prior, before, after, hint) for a, b, prior, before, after, hint in d["sites"])
    definition = tuple(d["definition"]) if d["definition"] else None
    return Analysis(d["kind"], d["detail"], sites, (d["edited"][0], d["edited"][1]),
                    (definition[0], definition[1]) if definition else None, d["limit"])


Waiter = tuple[asyncio.AbstractEventLoop, "asyncio.Future[dict[str, Any]]"]


@dataclass
class Waiting:
    """The requests sent and not answered yet, shared with the reader thread."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    futures: dict[int, Waiter] = field(default_factory=dict)
    ended: str = ""  # why the worker ended: no request is registered after that

    def add(self, rid: int, waiter: Waiter) -> bool:
        with self.lock:
            if not self.ended:
                self.futures[rid] = waiter
            return not self.ended

    def pop(self, rid: int) -> Waiter | None:
        with self.lock:
            return self.futures.pop(rid, None)


class EditProcess:
    """One worker process for a server's next-edit requests (started lazily, again after it
    ends; it ends with this object: its stdin is closed)."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self.outbox: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self.waiting = Waiting()
        self.ids = itertools.count(1)
        self.texts = Texts()  # what the worker holds (`edit_texts`)
        self.starts = 0
        self.resyncs = 0  # requests sent again with their texts whole
        self.sent_bytes = 0  # written to the workers' stdin
        self.rss = 0  # the worker's resident bytes, as its last answer said
        self.max_rss = MAX_WORKER_RSS
        self.memory_restarts = 0

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def warm(self) -> None:
        """Start the worker now if it is not running (a request for it will come)."""
        if not self.alive:
            self._start()

    def _start(self) -> None:
        try:
            cwd = str(runtime.runtime_dir())
        except (OSError, runtime.DaemonError):
            cwd = "/"
        proc = subprocess.Popen(child.python_command(WORKER), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                cwd=cwd, env=child.python_env(), close_fds=True)
        self.close()
        self.proc, self.outbox, self.waiting, self.texts = proc, queue.SimpleQueue(), Waiting(), Texts()
        self.starts += 1
        weakref.finalize(self, self.outbox.put, None)  # the worker ends with this object
        assert proc.stdin is not None and proc.stdout is not None
        threading.Thread(target=_write, args=(proc.stdin, self.outbox), name="next-edit-writer", daemon=True).start()
        threading.Thread(target=_read, args=(proc, proc.stdout, self.waiting, self._rss_of(proc)),
                         name="next-edit-reader", daemon=True).start()

    def _rss_of(self, proc: subprocess.Popen[bytes]) -> Callable[[int], None]:
        def seen(rss: int) -> None:  # on the reader thread: a worker replaced meanwhile is not this one
            if self.proc is proc:
                self.rss = rss
        return seen

    def _send(self, msg: dict[str, Any]) -> None:
        data = json.dumps(msg).encode() + b"\n"
        self.sent_bytes += len(data)
        self.outbox.put(data)

    async def _ask(self, msg: dict[str, Any], guard: Guard) -> dict[str, Any]:
        guard.check()
        if not self.alive:
            self._start()
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[dict[str, Any]] = loop.create_future()
        rid, waiting = msg["id"], self.waiting
        if not waiting.add(rid, (loop, fut)):
            fut.set_result({"error": waiting.ended})
        self._send(msg)

        def cancelled() -> None:  # on the loop: the request ends now, the worker stops at its next check
            self._send({"op": "cancel", "id": rid, "reason": guard.reason})
            if not fut.done():
                fut.set_exception(Cancelled(guard.reason))
        guard.on_cancel.append(cancelled)
        try:
            got = await fut
        finally:
            guard.on_cancel.remove(cancelled)
            waiting.pop(rid)
        if "cancelled" in got:
            raise Cancelled(guard.reason or got["cancelled"])
        if "error" in got:
            reason = f"next-edit worker failed: {got['error']}"
            log.warning(reason)
            guard.cancel(reason)
            raise WorkerFailed(reason)
        return got

    async def analyse(self, uri: str, snap: Snapshot, base: Base, guard: Guard) -> Analysed:
        """`next_edit_work.analyse` of `snap` against `base`, in the worker: the texts named by
        id, or by the changed middle of one it holds (`edit_texts`); sent again whole when the
        worker answers that it is out of step."""
        for _attempt in range(2):
            if not self.alive:
                self._start()  # before the refs: a new worker holds no text
            rid = next(self.ids)
            got = await self._ask({"op": "analyse", "id": rid, "uri": uri, "language": snap.language,
                                   "text": self.texts.ref(uri, snap.text), "base": self.texts.ref(uri, base.text),
                                   "base_errors": base.errors}, guard)
            if "resync" not in got:
                return Analysed(_analysis(got["analysis"]), got["errors"], got["settles"], rid)
            log.info("next-edit worker out of step (%s): the texts are sent whole", got["resync"])
            self.resyncs += 1
            self.texts.drop(uri)
        guard.cancel("the next-edit worker is out of step")
        raise WorkerFailed("the next-edit worker is out of step")

    async def checked(self, got: Analysed, fills: list[Suggested | None], placeholders: bool, kept: tuple[int, int],
                      enc: str, guard: Guard) -> list[dict[str, Any]]:
        """`next_edit_work.checked` of the request `got` analysed, with the model's `fills`."""
        out = await self._ask({"op": "check", "id": got.rid, "placeholders": placeholders, "kept": list(kept),
                               "enc": enc, "fills": [None if f is None else [f.start, f.end, f.text, f.confidence]
                                                     for f in fills]}, guard)
        got.settles = out["settles"]
        return list(out["suggestions"])

    def prime(self, uri: str, language: str, text: str) -> None:
        """The text before a document's first edit: the worker parses it now (started if need be)."""
        if not self.alive:
            self._start()
        self._send({"op": "prime", "uri": uri, "language": language, "text": self.texts.ref(uri, text)})

    def closed(self, uri: str) -> None:
        """The document is closed: the worker drops its trees and texts."""
        self.texts.drop(uri)
        if self.alive:
            self._send({"op": "close", "uri": uri})

    def close(self) -> None:
        """The worker ends (its stdin closed); a later request starts another."""
        if self.proc is not None:
            self.outbox.put(None)

    def bound(self) -> None:
        """Between requests (none is waiting for the worker): a worker whose resident memory
        passed `max_rss` ends now (what it had queued, a prime, it finishes first) and the next
        request starts another."""
        if self.alive and 0 < self.max_rss < self.rss and not self.waiting.futures:
            log.info("next-edit worker: %d MiB resident, over %d MiB: restarted", self.rss >> 20, self.max_rss >> 20)
            self.close()
            self.proc, self.rss = None, 0
            self.memory_restarts += 1

    async def held(self, guard: Guard) -> dict[str, int]:
        """What the worker holds: documents with trees (`mirrors`) or texts, analyses awaiting
        their check (`pending`), request guards, resident bytes."""
        return await self._ask({"op": "stats", "id": next(self.ids)}, guard)


def _write(pipe: IO[bytes], outbox: queue.SimpleQueue[bytes | None]) -> None:
    """The writer thread: the outbox to the worker's stdin; None closes it (the worker ends)."""
    while (data := outbox.get()) is not None:
        try:
            pipe.write(data)
            pipe.flush()
        except (BrokenPipeError, ValueError, OSError):
            return
    pipe.close()


def _read(proc: subprocess.Popen[bytes], pipe: IO[bytes], waiting: Waiting, on_rss: Callable[[int], None]) -> None:
    """The reader thread: each answer to its request's future; at the worker's end, an error
    to every request still waiting."""
    for line in pipe:
        try:
            msg = json.loads(line)
        except ValueError:
            log.warning("next-edit worker: an unreadable answer: %r", line[:200])
            continue
        if isinstance(msg.get("rss"), int):
            on_rss(msg["rss"])
        entry = waiting.pop(int(msg.get("id") or 0))
        if entry is not None:
            _answer(entry, msg)
    proc.wait()
    with waiting.lock:
        waiting.ended = f"the next-edit worker ended (exit {proc.returncode})"
        gone, waiting.futures = list(waiting.futures.values()), {}
    for entry in gone:
        _answer(entry, {"error": waiting.ended})


def _answer(entry: Waiter, msg: dict[str, Any]) -> None:
    try:
        entry[0].call_soon_threadsafe(_settle, entry[1], msg)
    except RuntimeError:
        pass  # its event loop is closed: nobody waits for it


def _settle(fut: asyncio.Future[dict[str, Any]], msg: dict[str, Any]) -> None:
    if not fut.done():
        fut.set_result(msg)
