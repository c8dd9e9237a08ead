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

Issue 49 adds: gitignored secrets (`.gitignore`, a nested one, `.git/info/exclude`), files
named as secrets (`.env.py`, a `credentials/` folder, `.env`, `id_rsa`, `secrets.yaml`, a
`.pem`), names with C1 controls, U+2028/U+2029 and bidi controls, a `.gitignore` built to make
a matcher backtrack, an `engine/` and an `llada_lsp/` package that leave a file when run, and
open tabs (`tabs_for`): secrets, a file outside the workspace, an untitled buffer, another
language's file; plus a good open tab (`GOOD_TAB`) whose text is expected in the context.
"""

from __future__ import annotations

import os
import random
import socket
import subprocess
from pathlib import Path

LEAK_NAMES = [f"leak_fn_{k}" for k in range(6)]
GOOD_NAME = "good_helper"
GOOD_TAB = "good_tab_helper"  # defined in an open tab inside the workspace: expected in the context
CONTROL_CHARS = ["\u0085", "\u009b", "\u2028", "\u2029", "\u202e", "\u200f", "\u2066", "\u061c", "\ufeff"]
RAN = "ran-workspace-code"  # a file the workspace's packages write into the secret folder if they run


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


def _leaky(name: str, marker: str, k: int) -> str:
    return f"def {LEAK_NAMES[k % len(LEAK_NAMES)]}():\n    return '{marker}'  # {name}\n"


def _gitignored(ws: Path, marker: str) -> None:
    (ws / ".gitignore").write_text("# local files\nsecrets_local.py\n*.log\n/build_out/\n")
    (ws / "secrets_local.py").write_text(_leaky("gitignored", marker, 3))
    (ws / "lib" / ".gitignore").write_text("private_*.py\n!private_ok.txt\n")
    (ws / "lib" / "private_keys.py").write_text(_leaky("nested gitignore", marker, 4))
    (ws / ".git" / "info").mkdir(parents=True, exist_ok=True)
    (ws / ".git" / "info" / "exclude").write_text("excluded_local.py\n")
    (ws / "excluded_local.py").write_text(_leaky("info/exclude", marker, 5))


def _secret_named(ws: Path, marker: str) -> None:
    (ws / ".env.py").write_text(_leaky(".env.py", marker, 0))
    (ws / "credentials").mkdir()
    (ws / "credentials" / "aws.py").write_text(_leaky("credentials/", marker, 1))
    (ws / ".env").write_text(f"API_KEY={marker}\n")
    (ws / "id_rsa").write_text(f"-----BEGIN OPENSSH PRIVATE KEY-----\n{marker}\n")
    (ws / "secrets.yaml").write_text(f"token: {marker}\n")
    (ws / "server.pem").write_text(f"-----BEGIN PRIVATE KEY-----\n{marker}\n")


def _control_names(ws: Path, marker: str, rng: random.Random) -> None:
    for k, ch in enumerate(rng.sample(CONTROL_CHARS, 3)):
        (ws / f"c{ch}name{k}.py").write_text(_leaky(f"control {ord(ch):x}", marker, k + 2))


def _hostile_gitignore(ws: Path) -> None:
    (ws / "lib" / "slow").mkdir()
    (ws / "lib" / "slow" / ".gitignore").write_text("*a" * 40 + "*b\n" + "**/" * 30 + "x/**/y\n[unclosed\n\\\n")
    (ws / "lib" / "slow" / ("a" * 200 + ".py")).write_text("def slow_named():\n    return 0\n")


def _packages(ws: Path, outside: Path) -> None:
    """`engine/` and `llada_lsp/` packages (common names) that leave a file if anything runs them."""
    for pkg in ("engine", "llada_lsp"):
        (ws / pkg / "daemon").mkdir(parents=True)
        code = f"import pathlib\npathlib.Path({str(outside / RAN)!r}).write_text({pkg!r})\n"
        (ws / pkg / "__init__.py").write_text(code)
        (ws / pkg / "__main__.py").write_text(code)
        (ws / pkg / "daemon" / "__init__.py").write_text(code)
        (ws / pkg / "daemon" / "cli.py").write_text(code)


def tabs_for(kinds: dict[str, int], ws: Path, outside: Path, marker: str) -> list[tuple[str, str, str]]:
    """The tabs an editor would have open beside `app.py` in this workspace: (uri, languageId,
    text). The good tab always; the others as the tricks drew them."""
    tabs = [((ws / "lib" / "tab_ok.py").as_uri(), "python", f"def {GOOD_TAB}(x):\n    return x + 1\n")]
    if "secret_named" in kinds:
        tabs += [((ws / ".env").as_uri(), "dotenv", f"API_KEY={marker}\n"),
                 ((ws / "id_rsa").as_uri(), "plaintext", f"-----BEGIN OPENSSH PRIVATE KEY-----\n{marker}\n"),
                 ((ws / "secrets.yaml").as_uri(), "yaml", f"token: {marker}\n"),
                 ((ws / ".env.py").as_uri(), "python", _leaky(".env.py", marker, 0))]
    if "gitignored" in kinds:
        tabs.append(((ws / "secrets_local.py").as_uri(), "python", _leaky("gitignored", marker, 3)))
    if "tab_outside" in kinds:
        tabs += [((outside / ".aws" / "credentials").as_uri(), "ini", f"aws_secret_access_key = {marker}\n"),
                 ((outside / "creds.py").as_uri(), "python", _leaky("outside", marker, 0)),
                 ("untitled:Untitled-1", "python", _leaky("untitled", marker, 1))]
    if "tab_other_language" in kinds:
        tabs += [((ws / "NOTES.md").as_uri(), "markdown", f"# notes\n{marker}\n"),
                 ((ws / "data.json").as_uri(), "json", f'{{"k": "{marker}"}}\n')]
    if "control_names" in kinds:
        tabs.append(((ws / "c\u2028tab.py").as_uri(), "python", _leaky("control tab", marker, 2)))
    return tabs


def make_workspace(rng: random.Random, ws: Path, outside: Path, marker: str = "", every: bool = False) -> dict[str, int]:
    """One hostile workspace in `ws` (created); returns what it holds, by kind. `marker`: the
    secret's marker, written into the workspace's own secrets (gitignored, secret-named);
    `every`: every trick (else a random draw of at least 4)."""
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
        ("gitignored", lambda: _gitignored(ws, marker)),
        ("secret_named", lambda: _secret_named(ws, marker)),
        ("control_names", lambda: _control_names(ws, marker, rng)),
        ("hostile_gitignore", lambda: _hostile_gitignore(ws)),
        ("engine_package", lambda: _packages(ws, outside)),
        ("tab_outside", lambda: None),
        ("tab_other_language", lambda: None),
    ]
    for kind, make in tricks if every else rng.sample(tricks, rng.randint(4, len(tricks))):
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
