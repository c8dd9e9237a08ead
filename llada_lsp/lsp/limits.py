"""Bounds on what a client's request parameters can make the server do (issue 41): the
`llada/nextEdit` lines and the workspace folders of `didChangeWorkspaceFolders`. Checked in the
handler, before any work, so that a hostile or buggy client gets Invalid Params at once and
never a scan of a billion lines on the event loop."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from urllib.parse import unquote, urlparse

# the protocol bounds next-edit's parameters: lsp imports nextedit (downward, as server.py does)
from llada_lsp.nextedit.next_edit import NextEditParams

MAX_LINE = 10_000_000  # a line number beyond this is refused (documents hold far fewer lines)
MAX_EDITED_LINES = 1000  # an edited range longer than this is cut to the lines nearest the cursor
MAX_FOLDERS = 64  # workspace folders indexed at most


class LimitError(ValueError):
    """Parameters outside the server's bounds (answered as Invalid Params)."""


def next_edit_params(p: NextEditParams) -> NextEditParams:
    """`p` within bounds: line numbers below MAX_LINE (else LimitError), the edited range at most
    MAX_EDITED_LINES long (the part nearest the position is kept)."""
    lines = [p.line, *(p.edited or ())]
    if any(not 0 <= n <= MAX_LINE for n in lines):
        raise LimitError(f"line numbers must be 0..{MAX_LINE}, got {lines}")
    if p.edited is None or p.edited[1] - p.edited[0] < MAX_EDITED_LINES:
        return p
    lo = min(max(p.edited[0], p.line - MAX_EDITED_LINES // 2), p.edited[1] - MAX_EDITED_LINES + 1)
    return dataclasses.replace(p, edited=(lo, lo + MAX_EDITED_LINES - 1))


def folder_uri(uri: object) -> str | None:
    """A workspace folder's URI when it is an absolute file:// URI of a local path
    (`file:///abs/dir` or `file://localhost/abs/dir`); None for anything else: another scheme,
    a relative path (`file:.`, `file:dir`), a remote host, a NUL byte."""
    if not isinstance(uri, str) or not uri.startswith("file:"):
        return None
    u = urlparse(uri)
    path = unquote(u.path)
    if u.netloc not in ("", "localhost") or not uri.startswith("file://") or "\0" in path:
        return None
    return uri if Path(path).is_absolute() else None


def folder_uris(uris: list[str | None]) -> tuple[list[str], list[str]]:
    """(the folder URIs kept, the ones refused), at most MAX_FOLDERS kept."""
    kept = [u for u in uris if folder_uri(u) is not None][:MAX_FOLDERS]
    return [u for u in kept if u is not None], [str(u) for u in uris if u is not None and u not in kept]
