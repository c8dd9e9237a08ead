"""The next-edit worker process: the parses, tree walks and checks of `llada/nextEdit`, in a
Python of their own (`python -P -s -m llada_lsp.nextedit.edit_worker`, started by
`llada_lsp.nextedit.edit_process`; docs/lsp.md "Limits").

tree-sitter's parser holds the GIL for the whole of a parse (hundreds of ms at its end on a
flat 500 KB file, and again when a big tree is freed), so no thread of the server can run it
without stalling the event loop; here it stalls only this process. The server sends texts
(its documents stay its own), this process keeps per document the trees of the texts it
saw last (`Mirror`) and parses a new text incrementally from the nearest one (the texts'
common ends give the edit), so a keystroke after a request reparses what changed.

One JSON object per line each way, answers in request order:
- `{"op": "analyse", "id", "uri", "language", "text", "base", "base_errors"}` ->
  `{"id", "analysis": {...}, "errors", "settles"}` (`next_edit_work.analyse`);
- `{"op": "check", "id", "fills", "placeholders", "kept", "enc"}` -> `{"id", "suggestions",
  "settles"}` (`next_edit_work.checked` on that request's analysis);
- `{"op": "cancel", "id", "reason"}`: read on a thread of its own, it sets the request's
  `Guard` (the work stops at its next check) and answers nothing itself;
- `{"op": "prime", "uri", "language", "text"}`: the text before a document's first edit (the
  base of the requests to come) is parsed now, while the user types, so that a request
  reparses only what changed; a request for the document that comes meanwhile stops it (the
  request then parses its own text at once: on a flat 500 KB file an incremental reparse
  after an edit at its top costs about as much as a whole parse, so waiting for the prime
  would double the request's time);
- `{"op": "close", "uri"}`: its trees, texts and analysis are dropped (a prime of it stops);
- `{"op": "stats", "id"}` -> `{"id", "mirrors", "texts", "pending", "guards"}`: what it holds.
Every answer also carries `rss`, this process's resident bytes (`rss_bytes`): past
`edit_process.MAX_WORKER_RSS` the server restarts it between requests.
Texts are named as `edit_texts` says (`text`, `base`: refs the worker resolves first, in that
order); a request naming a text it does not hold answers `{"id", "resync": why}`.
A request that is cancelled answers `{"id", "cancelled": reason}`, one that failed
`{"id", "error": message}`. The end of stdin ends the process.
"""

from __future__ import annotations

import json
import os
import queue
import sys
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import IO, Any

import tree_sitter as ts

from llada_lsp.nextedit.edit_analysis import Analysis, common_ends
from llada_lsp.nextedit.edit_limits import Cancelled, Guard, parse
from llada_lsp.nextedit.edit_texts import OutOfStep, Texts
from llada_lsp.nextedit.edit_window import Suggested
from llada_lsp.nextedit.next_edit_work import Analysed, Base, Snapshot, analyse, checked
from llada_lsp.text.syntax import parser_for

MAX_MIRRORS = 16  # documents whose trees are kept (the least recently used go first)
PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


@dataclass
class Mirror:
    """The trees of one document's texts seen last: the text analysed and the base."""

    texts: list[tuple[str, ts.Tree, int | None]] = field(default_factory=list)  # (text, tree, errors|None)

    def find(self, text: str) -> tuple[ts.Tree, int | None] | None:
        return next(((tree, errors) for t, tree, errors in self.texts if t == text), None)

    def keep(self, *entries: tuple[str, ts.Tree, int | None]) -> None:
        self.texts = []
        for e in entries:
            if not any(e[0] == t for t, _tree, _errors in self.texts):
                self.texts.append(e)


def _point(data: bytes, b: int) -> tuple[int, int]:
    return data.count(b"\n", 0, b), b - (data.rfind(b"\n", 0, b) + 1)


def reparsed(language: str, text: str, mirror: Mirror, guard: Guard) -> ts.Tree:
    """The tree of `text`: one the mirror has, else an incremental parse from the mirror's
    nearest text (its tree copied and edited over the texts' changed middle), else a parse."""
    parser = parser_for(language)
    assert parser is not None  # a request reaches the worker only for a grammar's language
    data = text.encode("utf-8", "surrogatepass")
    if not mirror.texts:
        return parse(parser, data, None, guard)
    old, tree, _errors = max(mirror.texts, key=lambda e: sum(common_ends(e[0], text)))
    p, s = common_ends(old, text)
    old_data = old.encode("utf-8", "surrogatepass")
    start = len(text[:p].encode("utf-8", "surrogatepass"))
    tail = len(text[len(text) - s:].encode("utf-8", "surrogatepass"))
    old_end, new_end = len(old_data) - tail, len(data) - tail
    edited = tree.copy()
    edited.edit(start_byte=start, old_end_byte=old_end, new_end_byte=new_end, start_point=_point(old_data, start),
                old_end_point=_point(old_data, old_end), new_end_point=_point(data, new_end))
    return parse(parser, data, edited, guard)


class Worker:
    """The requests of one server: the mirrors, and each analysed request until its check."""

    def __init__(self) -> None:
        self.mirrors: OrderedDict[str, Mirror] = OrderedDict()
        self.pending: dict[int, tuple[Snapshot, Base, Analysed]] = {}
        self.uri_of: dict[int, str] = {}
        self.texts = Texts()  # the texts the server named (`edit_texts`)
        self.dropped: list[int] = []  # requests whose analysis was dropped (their guards go too)

    def mirror(self, uri: str) -> Mirror:
        m = self.mirrors.pop(uri, None) or Mirror()
        self.mirrors[uri] = m
        while len(self.mirrors) > MAX_MIRRORS:
            self.mirrors.popitem(last=False)
        return m

    def handle(self, msg: dict[str, Any], guard: Guard) -> dict[str, Any] | None:
        op, rid = msg.get("op"), int(msg.get("id") or 0)
        if op == "close":
            self.mirrors.pop(msg["uri"], None)
            self.texts.drop(msg["uri"])
            self._drop(msg["uri"])
            return None
        if op in ("prime", "analyse"):  # the texts first, whatever follows: both sides keep them in step
            try:
                msg = {**msg, **{k: self.texts.resolve(msg["uri"], msg[k]) for k in ("text", "base") if k in msg}}
            except OutOfStep as e:
                self.texts.drop(msg["uri"])
                return None if op == "prime" else {"id": rid, "resync": str(e)}
        if op == "prime":
            mirror = self.mirror(msg["uri"])
            if mirror.find(msg["text"]) is None:
                try:
                    tree = reparsed(msg["language"], msg["text"], mirror, guard)
                except Cancelled:
                    return None  # a request for the document came (it goes first), or its close
                mirror.keep((msg["text"], tree, None), *mirror.texts)
                del mirror.texts[2:]
            return None
        try:
            if op == "stats":
                return {"id": rid, **self.held()}
            if op == "analyse":
                return {"id": rid, **self.analyse(rid, msg, guard)}
            if op == "check":
                return {"id": rid, **self.check(rid, msg, guard)}
            return {"id": rid, "error": f"unknown op {op!r}"}
        except Cancelled as e:
            self.pending.pop(rid, None)
            return {"id": rid, "cancelled": str(e) or guard.reason or "cancelled"}

    def _drop(self, uri: str) -> None:
        for rid in [r for r, u in self.uri_of.items() if u == uri]:
            self.pending.pop(rid, None)
            del self.uri_of[rid]
            self.dropped.append(rid)

    def held(self) -> dict[str, int]:
        """What this process holds (the `stats` op): documents with trees or texts, analyses."""
        return {"mirrors": len(self.mirrors), "texts": len(self.texts.docs), "pending": len(self.pending)}

    def analyse(self, rid: int, msg: dict[str, Any], guard: Guard) -> dict[str, Any]:
        uri, language, text, base_text = msg["uri"], msg["language"], msg["text"], msg["base"]
        self._drop(uri)  # a newer request for the document: the older one's check will not come
        mirror = self.mirror(uri)
        known = mirror.find(text)
        tree = known[0] if known is not None else reparsed(language, text, mirror, guard)
        old = mirror.find(base_text)
        errors = old[1] if old is not None and old[1] is not None else msg.get("base_errors")
        base = Base(base_text, old[0] if old is not None else None, errors)
        got = analyse(Snapshot(language, text, None, 0, tree, False), base, guard)
        entries: list[tuple[str, ts.Tree, int | None]] = [(text, tree, got.errors)]
        if base.tree is not None:
            entries.append((base_text, base.tree, base.errors))
        mirror.keep(*entries)
        a = got.analysis
        if a.sites:
            self.pending[rid] = (Snapshot(language, text, None, 0, tree, False), base, got)
            self.uri_of[rid] = uri
        return {"analysis": to_json(a), "errors": got.errors, "settles": got.settles}

    def check(self, rid: int, msg: dict[str, Any], guard: Guard) -> dict[str, Any]:
        held = self.pending.pop(rid, None)
        self.uri_of.pop(rid, None)
        if held is None:
            return {"error": "no analysis for this request (a newer one replaced it)"}
        snap, base, got = held
        fills = [None if f is None else Suggested(f[0], f[1], f[2], f[3], "model") for f in msg["fills"]]
        out = checked(snap, base, got, fills, bool(msg["placeholders"]), (msg["kept"][0], msg["kept"][1]),
                      msg["enc"], guard)
        return {"suggestions": out, "settles": got.settles}


def to_json(a: Analysis) -> dict[str, Any]:
    return {"kind": a.kind, "detail": a.detail, "sites": [[s.start, s.end, s.prior, s.before, s.after, s.hint]
                                                          for s in a.sites],
            "edited": list(a.edited), "definition": list(a.definition) if a.definition else None, "limit": a.limit}


def rss_bytes() -> int:
    """This process's resident memory now (/proc/self/statm); where there is no /proc, its peak
    (`getrusage`: bytes on macOS, KiB elsewhere); 0 where neither is (no bound)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * PAGE
    except (OSError, ValueError, IndexError):
        pass
    try:
        import resource  # noqa: PLC0415 - Unix only
    except ImportError:
        return 0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


def _stopped() -> Guard:
    guard = Guard(pausing=False)
    guard.cancel("stopped")
    return guard


def serve(inp: IO[bytes], out: IO[bytes]) -> None:
    """Answer the requests read from `inp` on `out` until `inp` ends."""
    work: queue.Queue[dict[str, Any] | None] = queue.Queue()
    guards: dict[int, Guard] = {}
    primes: dict[str, Guard] = {}  # the prime of each document not parsed yet
    lock = threading.Lock()

    def read() -> None:
        for line in inp:
            msg = json.loads(line)
            with lock:
                op = msg.get("op")
                if op == "cancel":
                    g = guards.get(msg.get("id", -1))
                    if g is not None:
                        g.cancel(str(msg.get("reason") or "cancelled"))
                    continue
                if op == "prime":
                    primes[msg["uri"]] = Guard(pausing=False)
                elif op in ("analyse", "close") and msg.get("uri") in primes:
                    primes.pop(msg["uri"]).cancel("a request came" if op == "analyse" else "closed")
                if msg.get("id") is not None:
                    guards.setdefault(msg["id"], Guard(pausing=False))
            work.put(msg)
        work.put(None)

    threading.Thread(target=read, name="next-edit-reader", daemon=True).start()
    worker = Worker()
    while (msg := work.get()) is not None:
        rid = msg.get("id")
        with lock:
            if msg.get("op") == "prime":
                guard = primes.get(msg["uri"]) or _stopped()  # gone: a request for the document came, or its close
            else:
                guard = guards.get(rid, Guard(pausing=False)) if rid is not None else Guard(pausing=False)
        try:
            reply = worker.handle(msg, guard)
        except Exception as e:  # noqa: BLE001 - one request's failure is answered; the process serves on
            reply = {"id": rid, "error": f"{type(e).__name__}: {e}"[:500]}
        with lock:
            if rid is not None and rid not in worker.pending:
                guards.pop(rid, None)  # answered for good (a request waiting for its check keeps its guard)
            for r in worker.dropped:
                guards.pop(r, None)  # its check will not come (a newer request, the document closed)
            worker.dropped.clear()
            if msg.get("op") == "prime" and primes.get(msg["uri"]) is guard:
                del primes[msg["uri"]]
            if reply is not None and msg.get("op") == "stats":
                reply["guards"] = len(guards)
        if reply is not None:
            reply["rss"] = rss_bytes()  # the server restarts this process past its limit (`edit_process`)
            out.write(json.dumps(reply).encode() + b"\n")
            out.flush()


if __name__ == "__main__":
    serve(sys.stdin.buffer, sys.stdout.buffer)
