"""The records one decoding step passes around: what a sequence feeds (`Feed`), the logits it
took (`Staged`), the token events it reports (`TokenEvent`) and the forwards its request
caused (`Tally`). `engine.decoding.decode` re-exports them."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Literal, Protocol

from torch import Tensor

StopFn = Callable[[list[int]], int | None]  # committed middle prefix -> cut index (or None)
Reason = Literal["end_of_middle", "stop_rule", "budget", "cancelled"]


@dataclass
class TokenEvent:
    kind: Literal["step", "edit_pass", "done"]
    step: int  # forwards spent so far
    fills: list[tuple[int, int]] = field(default_factory=list)  # (middle index, token)
    edits: list[tuple[int, int, int]] = field(default_factory=list)  # (middle index, old, new)
    complete: bool = False  # every position of the span is committed
    reason: Reason | None = None
    middle: list[int] | None = None  # on done: the final middle, cut at its end


@dataclass
class Tally:
    """The model forwards one request caused: every forward that carried any of its rows counts
    once, whatever it fed (prefill, draft steps, edit passes, multi-block passes, remask
    passes). A request's primary sequence and its alternatives (engine.decoding.alternatives) share
    one tally, and a remask goes on counting on its sequence's. `engine.decoding.batch.execute`
    notes each forward (`note_forward`); stats.forwards and TPF read it."""

    forwards: int = 0


class Tallied(Protocol):
    tally: Tally


def note_forward(seqs: Iterable[Tallied]) -> None:
    """One model forward carried `seqs`' rows: each distinct tally among them counts it once."""
    for t in {id(s.tally): s.tally for s in seqs}.values():
        t.forwards += 1


@dataclass
class Staged:
    """A forward taken by a sequence, waiting for its rows' confidences (`Sequence.commit`)."""

    logits: Tensor  # [n, V] the rows the policy reads, bans applied
    current: Tensor  # [n] the committed token at each row, -1 at a mask
    where: slice  # the middle indices of the rows
    edit_only: bool
    multi: bool  # a multi-block edit pass


@dataclass
class Feed:
    ids: list[int]
    pos: list[int]
    slots: list[int]
    kind: list[int]
    blk: list[int]
    logits_at: list[int]  # indices into the feed whose logits the update needs
    kv_len: int

    @classmethod
    def empty(cls) -> Feed:
        return cls([], [], [], [], [], [], 0)

    def add(self, token: int, pos: int, slot: int, kind: int, blk: int) -> None:
        self.ids.append(token)
        self.pos.append(pos)
        self.slots.append(slot)
        self.kind.append(kind)
        self.blk.append(blk)
