"""How the project starts a child Python (the daemon, the language server of the tools):
isolated from the directory it is started in, which is often a repository the user opened.

`python -m pkg` puts the current directory first on `sys.path`, and both editors start the
server in the workspace, so a repository holding `engine/__init__.py` would run as the
user's daemon. A child therefore gets `-P` (no current or script directory on `sys.path`)
and `-s` (no user site), runs in a directory of ours (`cwd`: the runtime dir), and its
`PYTHONPATH` keeps only absolute entries (an empty or relative one names a directory under
the current one: the workspace), led by the directory this project's packages were imported
from when that is no site dir (a checkout, an editable install), so that the child runs the
same code as its parent. Not `-I`: it would drop an absolute `PYTHONPATH` the user set on
purpose (a tree under test, packages outside the venv). No torch here.
"""

from __future__ import annotations

import os
import site
import sys
from collections.abc import Mapping
from pathlib import Path

FLAGS = ("-P", "-s")  # the interpreter flags of every child Python the project starts
# the directory holding the `engine` package (and `llada_lsp`, `kernels`): a checkout, or site-packages
PACKAGE_ROOT = Path(__file__).resolve().parents[2]


def python_command(module: str, *args: str) -> list[str]:
    """`python -P -s -m module args...` with this interpreter."""
    return [sys.executable, *FLAGS, "-m", module, *args]


def _site_dirs() -> set[Path]:
    """The interpreter's (or venv's) site-packages, which `-s` keeps (not the user site)."""
    return {Path(d).resolve() for d in site.getsitepackages()}


def python_path(value: str | None) -> str:
    """`PYTHONPATH` for a child: its absolute entries (empty and relative ones dropped), the
    project's own root first unless that is a site dir the child has anyway (a checkout, an
    editable or a `pip install --user` install is added)."""
    entries = [p for p in (value or "").split(os.pathsep) if p and os.path.isabs(p)]
    root = str(PACKAGE_ROOT)
    if PACKAGE_ROOT not in _site_dirs() and root not in entries:
        entries.insert(0, root)
    return os.pathsep.join(entries)


def python_env(base: Mapping[str, str] | None = None, **extra: str) -> dict[str, str]:
    """The environment of a child Python: `base` (default: this process's) with `extra`, its
    `PYTHONPATH` made safe (`python_path`) and `PYTHONSTARTUP` dropped."""
    env = {**(os.environ if base is None else base), **extra}
    env.pop("PYTHONSTARTUP", None)
    path = python_path(env.get("PYTHONPATH"))
    if path:
        env["PYTHONPATH"] = path
    else:
        env.pop("PYTHONPATH", None)
    return env
