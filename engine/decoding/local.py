"""The step loop driven by its caller, one request at a time: the batch-of-one case.

`complete` and `remask` submit one request to a `engine.decoding.scheduler.Scheduler` and step it in
the calling thread until the request's done or error event, yielding its text events as they
come; a set `cancel` event cancels it before the next forward. The same loop serves the
daemon's connections and the language server's in-process engine (which steps it in its torch
thread): there is no other decode loop. A generator closed early cancels its request.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterator

from engine.api import PRESET_ALTERNATIVES, CompletionRequest, EngineEvent
from engine.decoding.jobs import Emit
from engine.decoding.policies import Policy
from engine.decoding.rejections import Rejection
from engine.decoding.scheduler import Scheduler

LOCAL_OWNER = "\0local"  # the owner of requests from the loop's own thread
# rows of a local loop: a request and the alternatives of the preset that asks most of them
LOCAL_ROWS = max(1, *PRESET_ALTERNATIVES.values())


def complete(loop: Scheduler, req: CompletionRequest, cancel: threading.Event | None = None,
             policy: Policy | None = None) -> Iterator[EngineEvent]:
    """`req` decoded on `loop`."""
    return _drive(loop, req.request_id, cancel,
                  lambda emit: loop.submit(req, LOCAL_OWNER, emit, policy=policy))


def remask(loop: Scheduler, request_id: str, spans: list[tuple[int, int]],
           cancel: threading.Event | None = None) -> Iterator[EngineEvent]:
    """The finished request `request_id`'s characters `spans` decoded again on `loop`."""
    return _drive(loop, request_id, cancel, lambda emit: loop.remask(request_id, spans, LOCAL_OWNER, emit))


def _drive(loop: Scheduler, rid: str, cancel: threading.Event | None,
           submit: Callable[[Emit], None]) -> Iterator[EngineEvent]:
    out: deque[EngineEvent] = deque()

    def emit(ev: EngineEvent, _why: Rejection | None) -> None:
        out.append(ev)

    submit(emit)
    ended = cancelled = False
    try:
        while not ended:
            if cancel is not None and cancel.is_set() and not cancelled:
                cancelled = True
                loop.cancel(rid, LOCAL_OWNER)
            advanced = loop.step()
            while out and not ended:
                ev = out.popleft()
                ended = ev.kind in ("done", "error")
                yield ev
            if not ended and not advanced and (LOCAL_OWNER, rid) not in loop.running:
                ended = True
                yield EngineEvent("error", rid, "", error="the request ended without a done event")
    finally:
        if not ended:  # closed early: the request stops before the next forward
            loop.cancel(rid, LOCAL_OWNER)
            loop.step()
