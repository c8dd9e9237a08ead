"""A forward stopped between two layers once every request it carries is cancelled.

A cancel (a superseded request: the user typed on) reaches the step loop's inbox from another
thread while a forward runs, and used to wait for the whole forward and its update: the next
request's admission waited with it (issue 50: a request arriving at a random point of a ~12 ms
tiny-code step waited ~6 ms on average, a 4-row rescue forward 70 ms). `Interrupter` learns of
a cancel at once (`Scheduler.cancel` and `drop_owner` call it from any thread, before they
queue the command); the scheduler names the requests a forward carries, and a forward pre-hook
on each layer of the model (`watching`: any model with `layers`, the native one and the
adapters) raises `Interrupted` when all of them are cancelled. A prefill whose update stores
a prompt in the prompt cache (a request's first forward, longer than the scheduler's
`prefill_split`) runs whole, cancelled or not: the next request of the document, the user's
next keystroke, reuses that prompt (else, with every request superseded in its prefill, none
would); a first forward that feeds a few tokens past a cached prompt is stopped like any. The loop then applies the
cancels from its inbox as before and admits what waits; a forward that ran whole while its
requests' cancels waited skips their updates (the prompt is stored all the same).

A stopped forward leaves keys and values written by its first layers in the cancelled rows:
no one reads them. Those rows go back to the free list, and a request that takes one
restores its prompt from the prompt cache (a copy) and feeds what the cache lacks.

Test seam: `$LLADA_TEST_STEP_DELAY_FILE` (`STEP_DELAY_ENV`) names a file holding milliseconds that
every forward is made longer by (`injected_delay`, read at each forward; missing or empty: none; a
later smaller value cuts a delay short), so that tests get a model as slow, or as stuck, as they
need (tests/llada_lsp/lsp/test_slow_model.py). Unset, nothing is read.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Hashable, Iterable, Iterator
from pathlib import Path
from typing import Any

from engine.decoding.jobs import Key


class Interrupted(Exception):
    """The forward stopped between layers: every request it carried was cancelled."""


class Interrupter:
    """Cancels known before the loop applies them, and the check a forward's layers make.

    `cancel` / `drop` (any thread) note a cancel; `applied` / `dropped` (the loop, when it
    applies the command) forget it; `watching(model, keys)` (the loop, around a forward) names
    the requests whose rows the forward carries (an alternative's row counts as its request's);
    `check` raises `Interrupted` when every one of them is cancelled."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._keys: set[Key] = set()
        self._owners: set[Hashable] = set()
        self._carried: frozenset[Key] = frozenset()
        self.stopped = 0  # forwards stopped between layers

    def cancel(self, key: Key) -> None:
        with self._lock:
            self._keys.add(key)

    def drop(self, owner: Hashable) -> None:
        with self._lock:
            self._owners.add(owner)

    def applied(self, key: Key) -> None:
        with self._lock:
            self._keys.discard(key)

    def dropped(self, owner: Hashable) -> None:
        with self._lock:
            self._owners.discard(owner)

    def cancelled(self, key: Key) -> bool:
        """Whether a cancel of request `key` waits in the inbox."""
        with self._lock:
            return key in self._keys or key[0] in self._owners

    def check(self, *_: Any) -> None:  # noqa: ANN401 - a forward pre-hook's (module, args)
        carried = self._carried
        if carried and all(self.cancelled(k) for k in carried):
            self.stopped += 1
            raise Interrupted

    @contextlib.contextmanager
    def watching(self, model: Any, keys: Iterable[Key]) -> Iterator[None]:  # noqa: ANN401 - any model with `layers`
        """A forward of `model` that carries the requests `keys` (none: it runs whole): `check`
        runs before each of `model.layers`."""
        self._carried = frozenset(keys)
        layers = getattr(model, "layers", None) or []
        handles = [layer.register_forward_pre_hook(self.check) for layer in layers]
        try:
            yield
        finally:
            self._carried = frozenset()
            for h in handles:
                h.remove()


STEP_DELAY_ENV = "LLADA_TEST_STEP_DELAY_FILE"


def _delay_ms(path: str) -> float:
    try:
        return float(Path(path).read_text().strip() or 0)
    except (OSError, ValueError):
        return 0.0


def injected_delay(path: str | None) -> None:
    """The test seam's delay (module docstring): sleep while the file asks for more."""
    if not path:
        return
    t0 = time.perf_counter()
    while (time.perf_counter() - t0) * 1000 < _delay_ms(path):
        time.sleep(0.02)
