"""How long the daemon lives: it exits after an idle time with no clients, and a daemon the
user stopped stays stopped (no editor's auto-start brings it back) until asked explicitly.

The hold is the runtime dir's `engine.hold` (mode 0600): `{"until": <unix time> | null}`
(null: until an explicit start: `llada-engine serve`, or an editor's restart command, which
starts the language server with LLADA_ENGINE_RESTART=1). No torch here. `write_private`, the
atomic owner-only write, is here for the runtime dir's files too (engine.daemon.runtime
imports this module, not the other way round).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import time
from collections.abc import Callable
from pathlib import Path

HOLD_NAME = "engine.hold"
DEFAULT_IDLE_EXIT_S = 600.0


def write_private(path: Path, text: str) -> None:
    """Atomic write of a file only its owner can read."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.replace(tmp, path)


def _hold_file(directory: Path) -> Path:
    return directory / HOLD_NAME


def set_hold(directory: Path, seconds: float | None) -> None:
    """Keep the daemon stopped: for `seconds`, or (None) until an explicit start."""
    until = None if seconds is None else time.time() + seconds
    write_private(_hold_file(directory), json.dumps({"until": until}) + "\n")


def release_hold(directory: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        _hold_file(directory).unlink()


def held(directory: Path) -> str | None:
    """Why an auto-start must not start the daemon now (None: it may). An expired or
    unreadable hold is removed."""
    path = _hold_file(directory)
    try:
        raw = json.loads(path.read_text()).get("until")
        until = None if raw is None else float(raw)  # a hold of any other shape is unreadable
        if until is not None and not math.isfinite(until):
            raise ValueError(f"hold until {until}")
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError, AttributeError):
        release_hold(directory)
        return None
    if until is None:
        return ("the engine daemon was stopped with `llada-engine stop`; it stays stopped until "
                "restarted (:LladaRestart in Neovim, or `llada-engine serve`)")
    left = until - time.time()
    if left <= 0:
        release_hold(directory)
        return None
    return f"the engine daemon was stopped with `llada-engine stop --hold`; it may start again in {left:.0f} s"


async def exit_when_idle(idle_s: float, busy: Callable[[], bool], stop: Callable[[], None],
                         clock: Callable[[], float] = time.monotonic) -> None:
    """Call `stop` once `busy()` (a client connected, a request running) has been false for
    `idle_s` seconds; checked a few times a second at most."""
    idle_since = clock()
    step = min(1.0, max(idle_s / 10, 0.05))
    while True:
        await asyncio.sleep(step)  # the idle timer's tick
        now = clock()
        if busy():
            idle_since = now
        elif now - idle_since >= idle_s:
            stop()
            return
