"""The bounds of one `llada/nextEdit` analysis (docs/lsp.md "Next-edit suggestions", "Limits").

The analysis runs in a worker process (`llada_lsp.nextedit.edit_worker`: tree-sitter's parser
holds the GIL, so no thread of the server could run it without stalling the event loop), and
its work is bounded, and cancellable, whatever the file:
- `MAX_SITES`: a name scanned for its uses or calls (`edit_syntax.word_nodes`) may occur at
  most this many times (whole words) in the scope scanned; past it the request is refused
  (`Refused`, limit "sites") before any walk, since each occurrence costs Python work.
- `MAX_DEPTH`: a node the analysis starts a walk from (the edit, each occurrence) may lie at
  most this deep in the tree; deeper (20,000 nested parentheses), the request is refused
  (limit "depth"): tree-sitter finds a node's parent by descending from the root, so walks
  up a deep tree cost depth squared.
- `Guard`: the request's cancel flag, set on the event loop by a newer request or an edit of
  the document (its `on_cancel` calls end the server's wait at once) and in the worker by its
  `cancel` message; the analysis checks it between steps, and `parse` reads the text in
  chunks through a callback that checks it. On a thread of the server (the tests' direct calls)
  a check also yields the GIL for `YIELD_S` after each `YIELD_EVERY_S` of work, so that the
  event loop's thread gets it back at once; the worker process does not pause (under load a
  pause costs a wait for the CPU; its cancel reader gets the GIL at the switch interval).
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import tree_sitter as ts

MAX_SITES = 1000  # whole-word occurrences of a scanned name in its scope
MAX_DEPTH = 256  # tree depth of a node a walk starts from
CHUNK = 1024  # bytes handed to the parser per read callback (a guard check each)
YIELD_EVERY_S = 0.002  # the worker's work between two pauses
YIELD_S = 0.0002  # a pause: the event loop's thread takes the GIL if it waits for it


class Refused(Exception):
    """A limit is hit: the request answers nothing, with `reason`; `limit` is "sites" or "depth"."""

    def __init__(self, limit: str, reason: str) -> None:
        super().__init__(reason)
        self.limit, self.reason = limit, reason


class Cancelled(Exception):
    """The request was cancelled (a newer request, an edit of the document)."""


@dataclass
class Guard:
    """One request's cancel flag, shared by the event loop (which sets it) and its worker."""

    event: threading.Event = field(default_factory=threading.Event)
    reason: str = ""
    since: float = field(default_factory=time.perf_counter)  # the worker's last pause
    on_cancel: list[Callable[[], None]] = field(default_factory=list)  # called once, where `cancel` is
    pausing: bool = True  # off in the worker process: it has no event loop to let run

    def cancel(self, reason: str) -> None:
        if not self.event.is_set():
            self.reason = reason
            self.event.set()
            for call in list(self.on_cancel):
                call()

    @property
    def cancelled(self) -> bool:
        return self.event.is_set()

    def check(self) -> None:
        """Cancelled when the request is; else `pause`."""
        if self.event.is_set():
            raise Cancelled(self.reason)
        self.pause()

    def pause(self) -> None:
        """A pause when the worker has run `YIELD_EVERY_S` since the last one."""
        if self.pausing and time.perf_counter() - self.since >= YIELD_EVERY_S:
            time.sleep(YIELD_S)
            self.since = time.perf_counter()


def parse(parser: ts.Parser, data: bytes, old_tree: ts.Tree | None = None, guard: Guard | None = None) -> ts.Tree:
    """`data` parsed (incrementally from `old_tree`, edited to match it), read in chunks: the
    callback stops the parse at the guard's cancel (Cancelled)."""
    def read(b: int, _point: tuple[int, int]) -> bytes:
        if guard is not None:
            if guard.cancelled:
                return b""  # the end of the input: the parse ends at once (nothing raised in a callback)
            guard.pause()
        return data[b:b + CHUNK]
    tree = parser.parse(read, old_tree) if old_tree is not None else parser.parse(read)
    if guard is not None:
        guard.check()
    return tree


_WORD_EDGE = rb"A-Za-z0-9_\x80-\xff"
_WORD_BYTES = frozenset(b"_0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz" + bytes(range(128, 256)))


def word_spans(data: bytes, name: str, start: int, end: int, cap: int = MAX_SITES) -> list[tuple[int, int]]:
    """The byte spans of `name`'s whole-word occurrences in data[start:end] (the regex engine
    finds the name and checks its end; a literal first, so it scans at memchr speed); Refused
    when there are more than `cap`."""
    pat = re.compile(re.escape(name.encode()) + rb"(?![" + _WORD_EDGE + rb"])")
    out: list[tuple[int, int]] = []
    for m in pat.finditer(data, start):
        if m.end() > end:
            break
        i = m.start()
        if i > 0 and data[i - 1] in _WORD_BYTES:
            continue  # the end of a longer word
        if len(out) == cap:
            raise Refused("sites", f"`{name}` occurs more than {cap} times where its follow-ups are sought "
                                   f"(nextEdit site limit)")
        out.append(m.span())
    return out


def check_depth(root: ts.Node, byte: int, limit: int = MAX_DEPTH) -> None:
    """Refused when the node at `byte` lies deeper than `limit` below `root` (a cursor's
    descent: one step per level, never a walk up)."""
    cursor, depth = root.walk(), 0
    while cursor.goto_first_child_for_byte(byte) is not None:
        depth += 1
        if depth > limit:
            raise Refused("depth", f"the code at the edit or at a follow-up site is nested deeper than "
                                   f"{limit} levels (nextEdit depth limit)")
