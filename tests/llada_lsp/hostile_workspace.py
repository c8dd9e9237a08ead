"""Hostile workspaces for the workspace fuzz (tests/llada_lsp/context/test_fuzz_workspace.py): each one a
repository as an attacker would ship it, next to a secret it tries to make the server read.

`make_secret` writes the secret (a folder beside the workspaces, its files define the names the
workspace's `app.py` uses, each returning a unique marker); `make_workspace` writes one
workspace from a seeded random choice of: links out of it (absolute, relative, chained, into a
linked folder), links to special files (`/proc/self/fd/0`, `/proc/self/fd/1`,
`/proc/self/environ` (the server's environment holds the marker too), `/dev/zero`,
`/dev/urandom`), a FIFO, a unix socket, huge and binary files, names that are not UTF-8 or hold
newlines, folder loops and deep trees (up to 1,500 levels), plus one good file whose
definition is expected in the context (the control that the observation point sees context).
"""

from __future__ import annotations

import os
import random
import socket
import subprocess
from pathlib import Path

LEAK_NAMES = [f"leak_fn_{k}" for k in range(6)]
GOOD_NAME = "good_helper"


def make_secret(outside: Path, marker: str) -> Path:
    """The secret folder: `creds.py` defines every LEAK_NAMES function, returning `marker`."""
    outside.mkdir(parents=True, exist_ok=True)
    secret = outside / "creds.py"
    secret.write_text("".join(f"def {n}():\n    return '{marker}'\n\n\n" for n in LEAK_NAMES))
    (outside / "more").mkdir(exist_ok=True)
    (outside / "more" / "keys.py").write_text(f"def {LEAK_NAMES[0]}(x):\n    return '{marker}' + x\n")
    return secret


APP = ("from lib.good import {good}\n\n\ndef main():\n    a = {l0}() + {l1}()\n    b = {l2}() + {l3}()\n"
       "    c = {l4}({good}(a)) + {l5}()\n    return ")


def app_text() -> str:
    return APP.format(good=GOOD_NAME, **{f"l{k}": n for k, n in enumerate(LEAK_NAMES)})


def _deep(root: Path, depth: int) -> None:
    root.mkdir()
    d = root
    for _ in range(depth):
        d = d / "n"
        d.mkdir()
    (d / "bottom.py").write_text("def at_the_bottom():\n    return 0\n")


def make_workspace(rng: random.Random, ws: Path, outside: Path) -> dict[str, int]:
    """One hostile workspace in `ws` (created); returns what it holds, by kind."""
    secret = outside / "creds.py"
    ws.mkdir(parents=True)
    (ws / "lib").mkdir()
    (ws / "lib" / "good.py").write_text(f"def {GOOD_NAME}(x):\n    return x * 2\n")
    (ws / "app.py").write_text(app_text())
    kinds: dict[str, int] = {}

    def add(kind: str) -> None:
        kinds[kind] = kinds.get(kind, 0) + 1

    tricks = [
        ("link_abs", lambda: (ws / f"creds_{rng.randrange(99)}.py").symlink_to(secret)),
        ("link_rel", lambda: (ws / "lib" / "rel.py").symlink_to(os.path.relpath(secret, ws / "lib"))),
        ("link_chain", lambda: ((ws / "c2.py").symlink_to(secret), (ws / "c1.py").symlink_to(ws / "c2.py"))),
        ("dir_link", lambda: (ws / "linked").symlink_to(outside, target_is_directory=True)),
        ("dir_link_up", lambda: (ws / "lib" / "up").symlink_to("../..", target_is_directory=True)),
        ("dir_loop", lambda: (ws / "lib" / "loop").symlink_to(".", target_is_directory=True)),
        ("proc_stdin", lambda: (ws / "stdin.py").symlink_to("/proc/self/fd/0")),
        ("proc_stdout", lambda: (ws / "stdout.py").symlink_to("/proc/self/fd/1")),
        ("proc_environ", lambda: (ws / "environ.py").symlink_to("/proc/self/environ")),
        ("dev_zero", lambda: (ws / "zero.py").symlink_to("/dev/zero")),
        ("dev_urandom", lambda: (ws / "random.py").symlink_to("/dev/urandom")),
        ("fifo", lambda: os.mkfifo(ws / f"fifo{rng.randrange(9)}.py")),
        ("socket", lambda: _socket(ws / "sock.py")),
        ("huge", lambda: (ws / "huge.py").write_text(f"def {GOOD_NAME}_huge():\n    pass\n" + "# x\n" * 200_000)),
        ("binary", lambda: (ws / "blob.py").write_bytes(bytes(rng.randrange(256) for _ in range(4096)))),
        ("non_utf8_name", lambda: _write(os.fsencode(ws) + b"/bad\xff\xfe.py", f"def {LEAK_NAMES[1]}():\n    return 1\n")),
        ("newline_name", lambda: (ws / "a\nb.py").write_text(f"def {LEAK_NAMES[2]}():\n    return 2\n")),
        ("long_name", lambda: (ws / ("x" * 240 + ".py")).write_text("def long_named():\n    return 3\n")),
        ("deep", lambda: _deep(ws / "deep", rng.choice([20, 200, 1500]))),
        ("link_in_skip_dir", lambda: ((ws / "node_modules").mkdir(), (ws / "node_modules" / "x.py").symlink_to(secret))),
        ("link_to_link_dir", lambda: (ws / "via.py").symlink_to(ws / "linked" / "creds.py") if (ws / "linked").exists()
         else (ws / "via.py").symlink_to(outside / "more" / "keys.py")),
    ]
    for kind, make in rng.sample(tricks, rng.randint(4, len(tricks))):
        try:
            make()
            add(kind)
        except OSError:  # a name taken by an earlier trick
            pass
    return kinds


def _socket(path: Path) -> None:
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(path))
    s.close()


def _write(path: bytes, text: str) -> None:
    with open(path, "wb") as f:
        f.write(text.encode())


def remove(path: Path) -> None:
    """Remove a tree that may be 1,500 levels deep (shutil.rmtree recurses)."""
    subprocess.run(["rm", "-rf", str(path)], check=True)
