"""A scheduler's units of work: one request (`Job`, on one KV-cache row) and the commands
the daemon's connections put in its inbox (`Command`), applied between forwards."""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from typing import Literal

from torch import Tensor

from engine.api import CompletionRequest, EngineEvent
from engine.decoding.decode import Sequence
from engine.decoding.policies import Policy
from engine.decoding.rejections import Rejection
from engine.decoding.stream import TextStream

# (event, why it was refused: set on an error event); called on the model thread
Emit = Callable[[EngineEvent, "Rejection | None"], None]
Key = tuple[Hashable, str]  # (owner, request id): ids are scoped to a connection
Op = Literal["complete", "remask"]


@dataclass
class Job:
    req: CompletionRequest
    owner: Hashable
    emit: Emit
    deadline: float  # time.perf_counter() after which the request ends with reason "deadline"
    submitted: float = field(default_factory=time.perf_counter)
    op: Op = "complete"
    spans: list[tuple[int, int]] = field(default_factory=list)
    seq: Sequence | None = None
    stream: TextStream | None = None
    attrs: Tensor | None = None
    partial: str = ""
    row: int = -1
    batch_sum: int = 0  # sum of the batch sizes of the forwards it took part in
    parent: Job | None = None  # set on a fork: the request it decodes an alternative of
    forks: list[Job] = field(default_factory=list)
    last_step: int | None = None  # a done request waiting for its forks: until this step
    spawned: bool = False  # its forks were started (or it has none)
    policy: Policy | None = None  # overrides the plan's preset (benches)

    @property
    def key(self) -> Key:
        return (self.owner, self.req.request_id)

    @property
    def doc(self) -> str:
        """The document key it caches its prompt under."""
        return self.req.doc_key

    @property
    def preset(self) -> str | None:
        return self.req.plan.preset


@dataclass
class Command:
    op: Literal["submit", "cancel", "drop", "wake"]
    job: Job | None = None
    key: Key | None = None
    owner: Hashable = None


def fair_share_victim(running: Iterable[Job], owner: Hashable) -> Job | None:
    """Whose row a request of `owner` takes when every row is busy: the newest request of the
    owner holding the most rows, when that owner holds at least two more than `owner` (so
    moving one row makes the shares more even). Counts requests, not their alternatives nor
    done ones waiting for them. None: `owner` already has its fair share (it gets busy).
    One client alone may still use every row."""
    held: dict[Hashable, list[Job]] = {}
    for j in running:
        if j.parent is None and j.last_step is None:
            held.setdefault(j.owner, []).append(j)
    mine = len(held.get(owner, []))
    top = max(held, key=lambda o: len(held[o]), default=None)
    if top is None or top == owner or len(held[top]) < mine + 2:
        return None
    return max(held[top], key=lambda j: j.submitted)
