"""Where the user's daemon lives: the per-user runtime file, auto-start, status and stop.

No torch here: the language server imports this to find or start the daemon. The runtime
dir is `$LLADA_RUNTIME_DIR`, else `$XDG_RUNTIME_DIR/llada-lsp`, else `~/.cache/llada-lsp/run`
(mode 0700: an existing one owned by someone else is refused, one open to others is made
0700). It holds `engine.json` (url, pid, token, model; mode 0600, written atomically by
the daemon once it serves, removed when it stops), `token` (mode 0600: the daemon's secret;
`llada-engine serve` requires a token unless told `--no-token`, this one by default),
`engine.lock` (held while a daemon is being started: two editors starting at once get one
daemon) and `engine.log` (the auto-started daemon's output, mode 0600).
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import json
import os
import secrets
import signal
import stat
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from engine.daemon import child, lifetime
from engine.daemon.lifetime import write_private
from engine.model import model_path

RUNTIME_NAME = "engine.json"
LOCK_NAME = "engine.lock"
TOKEN_NAME = "token"
LOG_NAME = "engine.log"
EMBEDDED_DIR = model_path.EMBEDDED_DIR


class DaemonError(RuntimeError):
    """The daemon could not be found, started or stopped."""


class DaemonHeld(DaemonError):
    """The user stopped the daemon (`llada-engine stop`): auto-start leaves it stopped."""


ModelNotFound = model_path.ModelNotFoundError


# -- files ---------------------------------------------------------------------------------------
def runtime_dir(create: bool = True) -> Path:
    env = os.environ.get("LLADA_RUNTIME_DIR")
    if env:
        d = Path(env)
    elif os.environ.get("XDG_RUNTIME_DIR"):
        d = Path(os.environ["XDG_RUNTIME_DIR"]) / "llada-lsp"
    else:
        d = Path.home() / ".cache" / "llada-lsp" / "run"
    if create:
        secure_dir(d)
    return d


def secure_dir(d: Path) -> Path:
    """Create `d` (mode 0700) or check an existing one: owned by this user (else DaemonError:
    another user could plant a runtime file that sends our token to their daemon) and closed
    to group and others (made 0700 if not)."""
    try:
        d.mkdir(parents=True, exist_ok=True, mode=0o700)
        st = d.stat()
    except (FileExistsError, NotADirectoryError):
        st = None
    if st is None or not stat.S_ISDIR(st.st_mode):
        raise DaemonError(f"the runtime dir {d} is not a directory (a file is in its place): move that "
                          "file away, or set LLADA_RUNTIME_DIR to a directory of yours")
    if st.st_uid != os.getuid():
        raise DaemonError(f"the runtime dir {d} belongs to uid {st.st_uid}, not to this user "
                          f"({os.getuid()}): refusing to use it (set LLADA_RUNTIME_DIR to a directory of yours)")
    if stat.S_IMODE(st.st_mode) & 0o077:
        os.chmod(d, 0o700)
    return d


def default_token_file(directory: Path | None = None) -> Path:
    """The token `llada-engine serve` uses unless given `--token-file` (or `--no-token`)."""
    return (directory or runtime_dir()) / TOKEN_NAME


def open_private_log(path: Path) -> int:
    """A log file descriptor for appending, mode 0600 (an existing log is made 0600)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.fchmod(fd, 0o600)
    return fd


def runtime_file(directory: Path | None = None) -> Path:
    return (directory or runtime_dir()) / RUNTIME_NAME


def write_runtime(info: dict[str, Any], directory: Path | None = None) -> Path:
    path = runtime_file(directory)
    write_private(path, json.dumps(info, indent=2) + "\n")
    return path


def read_runtime(directory: Path | None = None) -> dict[str, Any] | None:
    try:
        d = json.loads(runtime_file(directory).read_text())
    except (OSError, ValueError):
        return None
    return d if isinstance(d, dict) and "url" in d and "pid" in d else None


def remove_runtime(pid: int, directory: Path | None = None) -> None:
    """Remove the runtime file if it still names process `pid`."""
    info = read_runtime(directory)
    if info is not None and info.get("pid") == pid:
        with contextlib.suppress(FileNotFoundError):
            runtime_file(directory).unlink()


def read_token(path: Path, create: bool = False) -> str:
    if not path.exists():
        if not create:
            raise DaemonError(f"token file {path} does not exist")
        write_private(path, secrets.token_urlsafe(32) + "\n")
    elif stat.S_IMODE(path.stat().st_mode) & 0o077:
        os.chmod(path, 0o600)
    token = path.read_text().strip()
    if not token:
        raise DaemonError(f"token file {path} is empty")
    return token


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@contextlib.contextmanager
def file_lock(path: Path, timeout: float) -> Iterator[None]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise DaemonError(f"timed out waiting for the lock {path}") from None
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)  # closing releases the lock


# -- models --------------------------------------------------------------------------------------
resolve_model = model_path.resolve  # one resolver for the daemon, the CLI and the loader


# -- probing, auto-start, stop --------------------------------------------------------------------
def probe(url: str, token: str | None, timeout: float = 3.0, kind: str = "health") -> dict[str, Any] | None:
    """hello (+ token) then a health or stats call; None when nothing healthy answers."""
    from websockets.exceptions import WebSocketException
    from websockets.sync.client import connect

    try:
        with connect(url, open_timeout=timeout, close_timeout=1.0) as ws:
            ws.send(json.dumps({"type": "hello", "protocol": 1, "token": token, "client": "probe"}))
            hello = json.loads(ws.recv(timeout))
            if hello.get("type") != "hello":
                return None
            ws.send(json.dumps({"type": kind}))
            reply = json.loads(ws.recv(timeout))
            return reply if reply.get("type") == kind else None
    except (OSError, TimeoutError, ValueError, WebSocketException):
        return None


def live_daemon(directory: Path | None = None, timeout: float = 3.0) -> dict[str, Any] | None:
    info = read_runtime(directory)
    if info is None or not pid_alive(int(info["pid"])):
        return None
    return info if probe(str(info["url"]), info.get("token"), timeout) is not None else None


def _log_tail(path: Path, n: int = 2000) -> str:
    try:
        return path.read_text(errors="replace")[-n:]
    except OSError:
        return ""


def ensure_daemon(model: str | None = None, mode: str | None = None, device: str | None = None,
                  extra_args: tuple[str, ...] = (), timeout: float = 180.0,
                  directory: Path | None = None, explicit: bool = False) -> dict[str, Any]:
    """The user's running daemon, or a new one started detached (one, even when several
    editors call this at once: the lock file serialises the start). After `llada-engine
    stop`, DaemonHeld unless `explicit` (the user asked for a restart: the hold ends)."""
    d = secure_dir(directory) if directory is not None else runtime_dir()
    info = live_daemon(d)
    if info is not None:
        return info
    if explicit:
        lifetime.release_hold(d)
    why = lifetime.held(d)
    if why is not None:
        raise DaemonHeld(why)
    with file_lock(d / LOCK_NAME, timeout):
        info = live_daemon(d)
        if info is not None:
            return info
        read_token(d / TOKEN_NAME, create=True)
        cmd = child.python_command("engine.daemon.cli", "serve", "--port", "0", "--token-file", str(d / TOKEN_NAME))
        if model and Path(model).expanduser().is_dir():
            model = str(Path(model).expanduser().resolve())  # the daemon runs in the runtime dir
        for flag, value in (("--model", model), ("--mode", mode), ("--device", device)):
            if value:
                cmd += [flag, value]
        cmd += list(extra_args)
        # isolated from the current directory (often the workspace: its `engine/` must not run)
        env = child.python_env(LLADA_RUNTIME_DIR=str(d), HF_HUB_OFFLINE="1")
        log = d / LOG_NAME
        with os.fdopen(open_private_log(log), "ab") as fh:
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=fh, stderr=subprocess.STDOUT,
                                    env=env, cwd=d, start_new_session=True, close_fds=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise DaemonError(f"the engine daemon exited with code {proc.returncode}; "
                                  f"its log ({log}) ends with:\n{_log_tail(log)}")
            info = read_runtime(d)
            if info is not None and info.get("pid") == proc.pid and \
                    probe(str(info["url"]), info.get("token")) is not None:
                return info
            time.sleep(0.1)  # polling the runtime file while the model loads
        proc.terminate()
        raise DaemonError(f"the engine daemon did not become ready in {timeout:.0f}s; see {log}")


def stop_daemon(directory: Path | None = None, timeout: float = 20.0) -> dict[str, Any] | None:
    """SIGTERM the registered daemon and wait for it to exit; returns its info (None: none ran)."""
    d = directory or runtime_dir()
    info = read_runtime(d)
    if info is None:
        return None
    pid = int(info["pid"])
    if not pid_alive(pid):
        remove_runtime(pid, d)
        return None
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while pid_alive(pid) and time.monotonic() < deadline:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)  # reap it when it is our own child
        time.sleep(0.05)
    if pid_alive(pid):
        os.kill(pid, signal.SIGKILL)
    remove_runtime(pid, d)
    return info
