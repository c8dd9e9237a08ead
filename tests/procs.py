"""Stopping a child process the tests started: ask (SIGTERM), wait, then force (SIGKILL)."""
from __future__ import annotations

import subprocess


def stop_process(proc: subprocess.Popen[bytes], grace: float = 10.0, reap: float | None = None) -> None:
    """Terminate `proc` if it still runs; kill it when it has not ended after `grace` seconds,
    then wait `reap` seconds (None: as long as it takes) for it to go."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(reap)
