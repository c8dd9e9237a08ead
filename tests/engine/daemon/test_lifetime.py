"""The daemon's lifetime (engine/daemon/lifetime.py): it exits after an idle time with no
clients (`--idle-exit`), and `llada-engine stop` holds: auto-start leaves it stopped until an
explicit start, or until the `--hold` time has passed."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path

import pytest
from websockets.sync.client import connect

from engine.daemon import lifetime, runtime
from tests.engine.daemon.daemon_helpers import ROOT, child_env, start_daemon, stop_daemon


def engine_cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "engine.daemon.cli", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)


def test_idle_exit_waits_for_the_last_client(tiny_model_dir: Path, tmp_path: Path) -> None:
    """With a client connected the daemon stays past its idle time; once the client leaves it
    exits (code 0, runtime file removed) no sooner than the idle time later."""
    idle = 2.0
    d = start_daemon(tmp_path / "run", tiny_model_dir, "--idle-exit", str(idle))
    try:
        with connect(d.url, additional_headers={"Authorization": f"Bearer {d.token}"}):
            with pytest.raises(subprocess.TimeoutExpired):
                d.proc.wait(2 * idle + 1)  # connected: it must not exit
            left = time.monotonic()
        code = d.proc.wait(60)
        waited = time.monotonic() - left
    finally:
        stop_daemon(d)
    assert code == 0
    assert waited >= idle - 0.2, waited
    assert not runtime.runtime_file(tmp_path / "run").exists()
    assert "no client for 2 s: exiting" in d.log.read_text()


def test_idle_exit_timer() -> None:
    """exit_when_idle on a fake clock: busy resets it; it stops once idle for idle_s."""
    now = [0.0]
    busy = [True]
    stopped: list[float] = []

    def clock() -> float:
        now[0] += 1.0  # each check is one second later
        if now[0] == 5.0:
            busy[0] = False
        return now[0]

    asyncio.run(lifetime.exit_when_idle(3.0, lambda: busy[0], lambda: stopped.append(now[0]), clock))
    assert stopped == [7.0]  # last seen busy at t=4, idle for 3 s at t=7


def test_hold_file(tmp_path: Path) -> None:
    assert lifetime.held(tmp_path) is None
    lifetime.set_hold(tmp_path, None)
    assert "stays stopped until restarted" in (lifetime.held(tmp_path) or "")
    lifetime.set_hold(tmp_path, 100)
    assert "may start again in" in (lifetime.held(tmp_path) or "")
    lifetime.set_hold(tmp_path, -1)  # expired: removed
    assert lifetime.held(tmp_path) is None and not (tmp_path / lifetime.HOLD_NAME).exists()
    (tmp_path / lifetime.HOLD_NAME).write_text("{not json")
    assert lifetime.held(tmp_path) is None


@pytest.mark.parametrize("until", ['"soon"', "[1]", "{}", "NaN", "Infinity", '"1e999"'])
def test_a_hold_of_the_wrong_shape_is_unreadable_and_removed(tmp_path: Path, until: str) -> None:
    """The hold time is converted inside the error handling: a bad one never raises."""
    (tmp_path / lifetime.HOLD_NAME).write_text(f'{{"until": {until}}}')
    assert lifetime.held(tmp_path) is None
    assert not (tmp_path / lifetime.HOLD_NAME).exists()


def test_a_file_at_the_runtime_dir_gives_a_clear_error(tmp_path: Path) -> None:
    """A regular file where the runtime dir goes: DaemonError saying so (not FileExistsError),
    from the library and from `llada-engine`, and the file is left as it was."""
    blocker = tmp_path / "run"
    blocker.write_text("mine\n")
    for d in (blocker, blocker / "below"):
        with pytest.raises(runtime.DaemonError, match="is not a directory"):
            runtime.secure_dir(d)
    for args in (["status"], ["stop"]):
        out = subprocess.run([sys.executable, "-m", "engine.daemon.cli", *args], cwd=ROOT,
                             env=child_env(blocker), capture_output=True, text=True, timeout=60)
        assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
        assert f"the runtime dir {blocker} is not a directory" in out.stderr
    assert blocker.read_text() == "mine\n"


def test_stop_holds_until_an_explicit_start(tiny_model_dir: Path, tmp_path: Path) -> None:
    """After `llada-engine stop`, ensure_daemon (an editor's auto-start) refuses with the
    reason and starts nothing; an explicit start (an editor's restart) starts it and ends the
    hold; `stop --hold 0` holds nothing."""
    run = tmp_path / "run"
    env = child_env(run, tiny_model_dir)
    args = ("--threads", "1")
    first = runtime.ensure_daemon(str(tiny_model_dir), extra_args=args, directory=run)
    try:
        sp = engine_cli(env, "stop")
        assert sp.returncode == 0 and "editors will not start it again until restarted" in sp.stdout, sp
        with pytest.raises(runtime.DaemonHeld, match="llada-engine stop"):
            runtime.ensure_daemon(str(tiny_model_dir), extra_args=args, directory=run)
        assert runtime.read_runtime(run) is None  # nothing was started
        second = runtime.ensure_daemon(str(tiny_model_dir), extra_args=args, directory=run, explicit=True)
        assert second["pid"] != first["pid"] and lifetime.held(run) is None
        sp = engine_cli(env, "stop", "--hold", "0")
        assert sp.returncode == 0 and "editors will not" not in sp.stdout, sp
        third = runtime.ensure_daemon(str(tiny_model_dir), extra_args=args, directory=run)
        assert third["pid"] != second["pid"]
    finally:
        runtime.stop_daemon(run)
