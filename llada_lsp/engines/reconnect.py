"""Recovering from a lost engine daemon: the retry schedule, and giving up on a frozen daemon.

A daemon that stops answering keepalive pings is dropped. In `auto` mode, one that is stopped
(SIGSTOP, SIGTSTP: state T in /proc) is retired before a fresh one is started: its runtime file
is removed if it still names that process (so that `runtime.ensure_daemon` starts another
at once instead of waiting on its probe, and never removes a newer daemon's file) and it is
sent SIGTERM, which it handles once continued (it then finishes cleanly). One that is merely
slow to answer (a loaded machine) is left alone: `ensure_daemon` probes it again and
reconnects to it if it answers, else starts a fresh one. No torch here.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
from collections.abc import Iterator
from pathlib import Path

from engine.daemon import runtime

log = logging.getLogger(__name__)

# The websocket keepalive that finds a frozen daemon: a ping every KEEPALIVE_S, its pong due
# within KEEPALIVE_TIMEOUT_S (the daemon's event loop answers pings while its model thread
# computes, so a busy daemon is not mistaken for a frozen one).
KEEPALIVE_S = 0.25
KEEPALIVE_TIMEOUT_S = 0.75
CLOSE_TIMEOUT_S = 0.3  # a frozen peer never completes the closing handshake
HEALTH_TIMEOUT_S = 1.0  # after a request's deadline passed: the daemon must answer a health call


def backoff(first: float = 0.0, start: float = 0.25, cap: float = 10.0) -> Iterator[float]:
    """Delays before successive reconnection attempts: `first`, then `start` doubling up to
    `cap` (and `cap` from then on)."""
    yield first
    delay = start
    while True:
        yield delay
        delay = min(delay * 2, cap)


def stopped(pid: int | None) -> bool:
    """The process is stopped by a signal (Linux /proc; False where that cannot be told)."""
    if pid is None:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] in ("T", "t")


def retire_daemon(pid: int | None, directory: Path | None = None) -> bool:
    """Give up on the user's unresponsive daemon `pid`: unregister it (only if the runtime file
    still names it) and ask it to stop. Returns whether it was the registered daemon."""
    if pid is None:
        return False
    try:
        d = directory or runtime.runtime_dir()
    except runtime.DaemonError as e:
        log.warning("cannot retire the engine daemon %s: %s", pid, e)
        return False
    info = runtime.read_runtime(d)
    if info is None or info.get("pid") != pid:
        return False  # another editor already replaced it, or it is not ours to stop
    runtime.remove_runtime(pid, d)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGTERM)  # a stopped daemon handles it once continued
    log.warning("the engine daemon %s stopped answering: unregistered and sent SIGTERM", pid)
    return True
