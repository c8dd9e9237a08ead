"""An index of the definitions in the workspace: name -> where it is defined, with the text
of each definition, for files on disk (under the workspace folders) and open documents.

Files on disk are indexed off the request path, in one background thread per scan, for one
language family at a time (the one a completion asks about), within bounds: file count, file
size, total characters kept and wall time; binary files and the usual generated or vendored
folders are skipped. Each file's entry is cached by (mtime, size): a rescan parses only what
changed. Open documents are indexed on the event loop from their own syntax tree, cached by
revision; an open document's entry hides its file's entry on disk. A language's scan is
repeated when a completion asks after RESCAN_S (only changed files are parsed again; deleted
ones are forgotten), a closed document's file is read again at once, and `generation` moves
whenever an entry on disk changes, so that a cached selection of chunks knows it is stale. `scan` runs a scan in the
caller's thread (the tests and the benches); `request_scan` starts one in the background.

The workspace is untrusted input (`llada_lsp.context.safe_files`): only regular files whose resolved
path stays under a workspace folder are read (no link out of it, no FIFO, device, socket or
`/proc` link), with `O_NONBLOCK`, bounded in size, and never on the event loop (a closed
document's file is read again on the index's reader thread); the walk is a stack, not
recursion; names that are not UTF-8 are skipped; `max_files` and `max_bytes` (the options
`workspaceIndex.maxFiles` and `workspaceIndex.maxBytes`) bound what the index holds.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlparse

from llada_lsp.context.definitions import (
    Definition,
    definition_text,
    definitions_in,
    extract_definitions,
)
from llada_lsp.context.exclusions import Exclusions, family
from llada_lsp.context.safe_files import read_regular, resolved_roots, utf8_path, walk
from llada_lsp.text.documents import Document, looks_binary
from llada_lsp.text.syntax import normalize_language

log = logging.getLogger(__name__)

MAX_FILES = 2000  # files indexed per language family
MAX_FILE_BYTES = 256 * 1024  # larger files are skipped
MAX_TOTAL_BYTES = 16 * 1024 * 1024  # of the files indexed, over all files, DEF_COST per definition included
DEF_COST = 384  # bytes a definition costs the index beyond its file's bytes (bench/index_memory.py)
MAX_SCAN_S = 5.0  # wall time of one scan
MAX_DIRS = 20000  # directories visited by one scan
RESCAN_S = 60.0  # a language's files are looked at again after this long
SKIP_DIRS = frozenset({"node_modules", "__pycache__", "venv", "site-packages", "target", "build", "dist",
                       "out", "vendor", "third_party"})


def path_of(uri: str) -> str:
    """A document's key: its file path for a file:// URI (so that an open document and its file
    on disk meet), else the URI itself."""
    if uri.startswith("file:"):
        return os.path.normpath(unquote(urlparse(uri).path))
    return uri


@dataclass(frozen=True)
class Entry:
    """One file's definitions and the text of each (`texts[i]` shows `defs[i]`)."""

    key: str  # path_of(uri)
    language: str
    stamp: tuple[float, int]  # (mtime, size) on disk; (-1, revision) for an open document
    defs: tuple[Definition, ...]
    texts: tuple[str, ...]
    is_open: bool = False
    # name -> the index of its definition (an int: most names), or of each (a tuple)
    by_name: dict[str, int | tuple[int, ...]] = field(default_factory=dict, compare=False, repr=False)

    def chars(self) -> int:
        return sum(len(t) for t in self.texts)

    def where(self, name: str) -> tuple[int, ...]:
        """The indexes of `name`'s definitions in this file (none: empty)."""
        got = self.by_name.get(name)
        return () if got is None else (got,) if isinstance(got, int) else got

    def cost(self) -> int:
        """What the entry counts against `max_bytes`: its file's bytes plus DEF_COST per
        definition (an estimate of its memory, bench/index_memory.py)."""
        return self.stamp[1] + DEF_COST * len(self.defs)


def make_entry(key: str, language: str, stamp: tuple[float, int], text: str,
               defs: tuple[Definition, ...], is_open: bool = False) -> Entry:
    lines = text.split("\n")
    by_name: dict[str, list[int]] = {}
    for i, d in enumerate(defs):
        by_name.setdefault(d.name, []).append(i)
    return Entry(key, language, stamp, defs, tuple(definition_text(lines, d) for d in defs), is_open,
                 {n: ix[0] if len(ix) == 1 else tuple(ix) for n, ix in by_name.items()})


@dataclass
class WorkspaceIndex:
    roots: list[Path] = field(default_factory=list)
    files: dict[str, Entry] = field(default_factory=dict)  # on disk, by path
    opened: dict[str, Entry] = field(default_factory=dict)  # open documents, by path_of(uri)
    names: dict[str, str | set[str]] = field(default_factory=dict)  # name -> the key (or keys) of its files on disk
    scanned: dict[str, float] = field(default_factory=dict)  # language -> when its scan ended
    lock: threading.Lock = field(default_factory=threading.Lock)
    thread: threading.Thread | None = None
    max_files: int = MAX_FILES
    max_bytes: int = MAX_TOTAL_BYTES
    real_roots: list[Path] = field(default_factory=list)  # the roots, resolved
    reader: ThreadPoolExecutor = field(default_factory=lambda: ThreadPoolExecutor(1, "llada-index-read"))
    pending: Future[None] | None = None  # the last re-read of a closed document's file
    generation: int = 0  # moves on whenever a file's entry is added, changed or forgotten
    exclusions: Exclusions = field(default_factory=Exclusions)  # secrets and gitignored files

    def set_roots(self, uris: list[str | None]) -> None:
        """The workspace folders (rootUri, workspaceFolders): file:// URIs of directories. Files
        outside the new folders are forgotten; every language is scanned again when asked."""
        roots = [Path(path_of(u)) for u in uris if u and u.startswith("file:")]
        self.roots = [r for i, r in enumerate(roots) if r.is_absolute() and r.is_dir() and r not in roots[:i]]
        self.real_roots = resolved_roots(self.roots)
        self.exclusions.set_roots(self.roots, self.real_roots)
        self.scanned.clear()
        for key in [k for k in list(self.files) if not self._under_roots(k) or self.excluded(k)]:
            self._forget(key)
        with self.lock:
            for key in [k for k in self.opened if not self.usable(k)]:
                del self.opened[key]

    def excluded(self, path: str) -> bool:
        """Whether the file at `path` is secret or gitignored (`exclusions`)."""
        return self.exclusions.secret(path) or self.exclusions.ignored(path)

    def usable(self, key: str) -> bool:
        """Whether an open document's key may be context: a printable path inside a workspace
        folder, neither secret nor ignored (`Exclusions.usable`)."""
        return utf8_path(key) and self.exclusions.usable(key)

    def _under_roots(self, key: str) -> bool:
        return any(Path(key).is_relative_to(r) for r in self.roots)

    def relative(self, key: str) -> str:
        """How a chunk names its file: relative to the workspace folder holding it."""
        for root in self.roots:
            try:
                return Path(key).relative_to(root).as_posix()
            except ValueError:
                continue
        parts = Path(key).parts
        return "/".join(parts[-2:]) if len(parts) > 1 else key

    # -- lookups (the request path) -----------------------------------------------------------
    def lookup(self, name: str) -> list[tuple[Entry, int]]:
        """Where `name` is defined: (entry, index of the definition), open documents first
        and hiding their files on disk, then files on disk by path."""
        out: list[tuple[Entry, int]] = []
        with self.lock:
            for e in self.opened.values():
                out.extend((e, i) for i in e.where(name))
            for key in sorted(_keys(self.names.get(name))):
                if key not in self.opened:
                    e = self.files[key]
                    out.extend((e, i) for i in e.where(name))
        return out

    def entry(self, key: str) -> Entry | None:
        with self.lock:
            return self.opened.get(key) or self.files.get(key)

    # -- open documents (the event loop) --------------------------------------------------------
    def index_open(self, doc: Document, keep: bool = True) -> Entry:
        """The entry of an open document, computed again when its revision moved on; kept
        for lookups only when `keep` (the caller checked that it is `usable`)."""
        key = path_of(doc.uri)
        e = self.opened.get(key)
        if e is not None and e.stamp == (-1, doc.revision):
            return e
        tree = doc.syntax_tree() if doc.unservable_reason() is None else None
        defs = definitions_in(tree.root_node) if tree is not None else ()
        e = make_entry(key, doc.language_id, (-1, doc.revision), doc.text, defs, True)
        if keep:
            with self.lock:
                self.opened[key] = e
        return e

    def drop_open(self, key: str) -> None:
        """An open document that may not be context (any more) leaves the lookups."""
        if key in self.opened:
            with self.lock:
                self.opened.pop(key, None)

    def close(self, uri: str) -> None:
        """An open document closed: its file on disk (perhaps saved since) is read again, on
        the reader thread (a FIFO or a slow disk never holds the event loop)."""
        key = path_of(uri)
        with self.lock:
            self.opened.pop(key, None)
        if key in self.files or (self.roots and self._under_roots(key)):
            self.pending = self.reader.submit(self._reread, key)

    def _reread(self, key: str) -> None:
        lang = self.files[key].language if key in self.files else normalize_language("", key)
        if self._index_file(key, lang) is None and (self.excluded(key) or
                                                     read_regular(key, self.real_roots, MAX_FILE_BYTES) is None):
            self._forget(key)

    def settle(self, timeout: float | None = None) -> None:
        """Wait for the last re-read of a closed document's file (the tests)."""
        if self.pending is not None:
            self.pending.result(timeout)

    # -- files on disk (a background thread) ------------------------------------------------------
    def request_scan(self, language: str) -> bool:
        """Start a background scan for `language`'s family unless one runs or it was scanned
        (True: one was started)."""
        if not self.roots or (self.thread is not None and self.thread.is_alive()):
            return False
        last = self.scanned.get(language)
        if last is not None and (last == 0.0 or time.monotonic() - last < RESCAN_S):
            return False
        self.scanned[language] = 0.0  # asked for; a later request does not start it again
        self.thread = threading.Thread(target=self.scan, args=(language,), name="llada-index", daemon=True)
        self.thread.start()
        return True

    def scan(self, language: str, max_s: float = MAX_SCAN_S) -> int:
        """Index the files of `language`'s family under the roots (bounded); returns how many
        were parsed this time. Runs in any thread: only the dicts are shared, under the lock."""
        langs = family(language)
        t0 = time.monotonic()
        parsed = seen = 0
        total = sum(e.cost() for e in list(self.files.values()))
        found: set[str] = set()
        whole = True
        ex = self.exclusions
        deadline = t0 + max_s

        def keep_dir(p: str, d: str) -> bool:  # past the deadline, no folder is entered (the walk ends)
            return (not d.startswith(".") and d not in SKIP_DIRS and not ex.entry_excluded(p, True)
                    and time.monotonic() < deadline)

        for path in walk(list(self.roots), keep_dir,
                         lambda p, n: normalize_language("", n) in langs and not ex.entry_excluded(p, False),
                         MAX_DIRS):
            if not path:  # the walk stopped at MAX_DIRS
                whole = False
                break
            seen += 1
            found.add(path)
            if seen > self.max_files or total > self.max_bytes or time.monotonic() - t0 > max_s:
                whole = False
                log.info("workspace index for %s stopped at its bounds (%d files)", language, seen - 1)
                break
            got = self._index_file(path, normalize_language("", path), checked=True)
            if got is not None:
                parsed += 1
                total += got
        if time.monotonic() >= deadline:
            whole = False
        if whole:  # what the walk did not find was deleted or moved (or is not a file now)
            for key in [k for k, e in list(self.files.items()) if e.language in langs and k not in found]:
                self._forget(key)
        self.scanned[language] = time.monotonic()
        return parsed

    def _forget(self, key: str) -> None:
        with self.lock:
            old = self.files.pop(key, None)
            if old is None:
                return
            for d in old.defs:
                _discard(self.names, d.name, key)
            self.generation += 1

    def _index_file(self, path: str, language: str, checked: bool = False) -> int | None:
        """Parse one file when it changed since its entry; the bytes it holds, or None. Only a
        regular file inside the roots, neither secret nor gitignored (`checked`: the walk
        checked it), is read (`safe_files.read_regular`)."""
        if not utf8_path(path) or (not checked and self.excluded(path)):
            return None
        got = read_regular(path, self.real_roots, MAX_FILE_BYTES)
        if got is None:
            log.debug("not indexed: %r (outside the workspace, not a regular file, or too large)", path)
            return None
        stamp, data = got
        old = self.files.get(path)
        if old is not None and old.stamp == stamp:
            return None
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            return None
        if looks_binary(text):
            return None
        e = make_entry(path, language, stamp, text, extract_definitions(language, text))
        cost = e.cost() - (old.cost() if old is not None else 0)
        with self.lock:
            if old is not None:
                for d in old.defs:
                    _discard(self.names, d.name, path)
            self.files[path] = e
            for d in e.defs:
                _add(self.names, d.name, path)
            self.generation += 1
        return cost


# A name's files: one key as a str (most names: a set costs 200 bytes), several as a set.
def _keys(got: str | set[str] | None) -> tuple[str, ...] | set[str]:
    return () if got is None else (got,) if isinstance(got, str) else got


def _add(names: dict[str, str | set[str]], name: str, key: str) -> None:
    got = names.get(name)
    if got is None:
        names[name] = key
    elif isinstance(got, str):
        if got != key:
            names[name] = {got, key}
    else:
        got.add(key)


def _discard(names: dict[str, str | set[str]], name: str, key: str) -> None:
    got = names.get(name)
    if got == key:
        del names[name]
    elif isinstance(got, set):
        got.discard(key)
        if len(got) == 1:
            names[name] = next(iter(got))
        elif not got:
            del names[name]
