"""Reading a workspace's files as untrusted input (SECURITY.md "A repository is untrusted").

A repository the user opens may hold links out of itself (`a.py -> ~/.aws/credentials`),
special files (FIFOs, devices, sockets, `/proc/self/fd/0`), huge or binary files, names that
are not UTF-8 and folders nested thousands deep. Everything here reads only what is safe:

- `inside(path, roots)`: the path, resolved (every link followed), lies under one of the
  resolved workspace folders; `/proc`, `/dev` and `/sys` never do;
- `read_regular(path, roots, max_bytes)`: opens the resolved path with `O_NONBLOCK` and
  `O_NOFOLLOW` (a FIFO or device never blocks the open, a link swapped in afterwards is not
  followed), checks with `fstat` that what was opened is a regular file no larger than
  `max_bytes`, and reads at most that much;
- `walk(roots, ...)`: the files under the folders, without recursion (a stack of
  `os.scandir`), never following a folder link, skipping names that are not valid UTF-8 (they
  never reach a prompt or the tokenizer), bounded in folders visited.
"""

from __future__ import annotations

import errno
import os
import stat
import unicodedata
from collections.abc import Callable, Iterator
from pathlib import Path

SPECIAL_TREES = (Path("/proc"), Path("/dev"), Path("/sys"))
MAX_NAME_CHARS = 255
CONTROL_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs"})


def utf8_name(name: str) -> bool:
    """Whether a file name decoded by the OS is valid UTF-8 (no surrogate escapes) and printable
    enough to show to a model: no control or format character (Unicode categories Cc, Cf, Zl,
    Zp: C0 and C1 controls such as U+0085 and U+009B, bidi controls, U+2028 and U+2029)."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return len(name) <= MAX_NAME_CHARS and not any(
        unicodedata.category(c) in CONTROL_CATEGORIES for c in name)


def utf8_path(path: str) -> bool:
    """Whether every part of `path` is a valid, printable UTF-8 name (`utf8_name`)."""
    return all(utf8_name(part) for part in path.split(os.sep) if part)


def resolved_roots(roots: list[Path]) -> list[Path]:
    out: list[Path] = []
    for r in roots:
        try:
            out.append(Path(os.path.realpath(r, strict=True)))
        except OSError:
            continue
    return out


def inside(path: str | Path, roots: list[Path]) -> Path | None:
    """The resolved `path` when it lies under one of `roots` (already resolved), else None."""
    try:
        real = Path(os.path.realpath(path, strict=True))
    except (OSError, ValueError, RuntimeError):
        return None
    if any(real.is_relative_to(s) for s in SPECIAL_TREES):
        return None
    return real if any(real.is_relative_to(r) for r in roots) else None


def read_regular(path: str | Path, roots: list[Path], max_bytes: int) -> tuple[tuple[float, int], bytes] | None:
    """((mtime, size), the bytes) of a regular file inside `roots` of at most `max_bytes`;
    None for anything else (outside, special, too large, gone, unreadable). Never blocks on a
    FIFO or device: the open is non-blocking and the type is checked on the open descriptor."""
    real = inside(path, roots)
    if real is None:
        return None
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(real, flags)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > max_bytes:
            return None
        chunks: list[bytes] = []
        left = max_bytes + 1
        while left > 0:
            try:
                b = os.read(fd, min(left, 1 << 16))
            except OSError as e:
                if e.errno in (errno.EAGAIN, errno.EWOULDBLOCK):
                    return None
                raise
            if not b:
                break
            chunks.append(b)
            left -= len(b)
        data = b"".join(chunks)
        if len(data) > max_bytes:
            return None  # it grew while read
        return (st.st_mtime, st.st_size), data
    except OSError:
        return None
    finally:
        os.close(fd)


def walk(roots: list[Path], keep_dir: Callable[[str, str], bool], keep_file: Callable[[str, str], bool],
         max_dirs: int) -> Iterator[str]:
    """Paths of the files under `roots` (in a stable order) that `keep_file(path, name)`
    accepts, entering folders that `keep_dir(path, name)` accepts; no folder link is followed, file links are
    given (the reader resolves them); names that are not valid UTF-8 are skipped. Stops after
    `max_dirs` folders, then yields "" (the walk was cut short); recursion depth is not a
    limit (a stack)."""
    dirs = 0
    for root in roots:
        stack = [str(root)]
        while stack:
            top = stack.pop()
            dirs += 1
            if dirs > max_dirs:
                yield ""
                return
            try:
                with os.scandir(top) as it:
                    entries = sorted(it, key=lambda e: e.name)
            except OSError:
                continue
            subdirs: list[str] = []
            for e in entries:
                if not utf8_name(e.name):
                    continue
                try:
                    if e.is_dir(follow_symlinks=False):
                        if keep_dir(e.path, e.name):
                            subdirs.append(e.path)
                    elif (e.is_file(follow_symlinks=False) or e.is_symlink()) and keep_file(e.path, e.name):
                        yield e.path
                except OSError:
                    continue
            stack.extend(reversed(subdirs))
