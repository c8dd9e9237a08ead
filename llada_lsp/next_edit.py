"""`llada/nextEdit`: next-edit suggestions after an edit (docs/lsp.md "Next-edit suggestions").

The lines around the edit (`llada_lsp.edit_window`: below the edited lines, then above them;
the edited lines themselves stay out) go to the engine as drafts for edit-only passes
(`EngineClient.next_edit`); the tokens it replaces come back as suggestions, which are mapped
onto the document, merged per line (those that would write a U+FFFD, a split character, are
dropped) and answered as LSP ranges. The newest request for a
document wins: it cancels the older one's engine job and the older one answers an empty list
with the reason `superseded`; an edit of the document does the same to a running request
(`document changed`), since its answer would be stale.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from engine.api import NextEditRequest
from llada_lsp.documents import Document, DocumentStore
from llada_lsp.edit_window import (
    Region,
    Suggested,
    by_line,
    in_document,
    lsp_suggestion,
    mangled,
    prompt_around,
    regions,
    touches,
)
from llada_lsp.engine_base import EngineClient, EngineJob
from llada_lsp.options import Options
from llada_lsp.positions import Encoding, PositionError

log = logging.getLogger(__name__)

METHOD = "llada/nextEdit"


class NextEditParamsError(ValueError):
    """The request's params lack a field or hold one of the wrong type."""


@dataclass(frozen=True)
class NextEditParams:
    uri: str
    version: int | None
    line: int
    character: int
    edited: tuple[int, int] | None = None  # the edited range's first and last line


@dataclass
class Answer:
    """The result: the document version it was computed on, the suggestions, and why it is
    empty when it is."""

    version: int | None
    suggestions: list[dict[str, Any]] = field(default_factory=list)
    reason: str = ""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"version": self.version, "suggestions": self.suggestions}
        if self.reason:
            out["reason"] = self.reason
        return out


def _field(obj: Any, name: str) -> Any:
    """A field of a params object, whether pygls made it a namedtuple or it is a dict."""
    return obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)


def _int(obj: Any, name: str, where: str) -> int:
    v = _field(obj, name)
    if not isinstance(v, int) or isinstance(v, bool) or v < 0:
        raise NextEditParamsError(f"{where}.{name} must be a non-negative integer, got {v!r}")
    return v


def parse_params(params: Any) -> NextEditParams:
    """{textDocument: {uri, version?}, position, range?} (docs/lsp.md)."""
    doc, pos = _field(params, "textDocument"), _field(params, "position")
    uri = _field(doc, "uri") if doc is not None else None
    if not isinstance(uri, str):
        raise NextEditParamsError("textDocument.uri is required")
    if pos is None:
        raise NextEditParamsError("position is required")
    version = _field(doc, "version")
    if version is not None and (not isinstance(version, int) or isinstance(version, bool)):
        raise NextEditParamsError(f"textDocument.version must be an integer, got {version!r}")
    line, character = _int(pos, "line", "position"), _int(pos, "character", "position")
    rng, edited = _field(params, "range"), None
    if rng is not None:
        start, end = _field(rng, "start"), _field(rng, "end")
        if start is None or end is None:
            raise NextEditParamsError("range needs start and end")
        a, b = _int(start, "line", "range.start"), _int(end, "line", "range.end")
        edited = (min(a, b), max(a, b))
    return NextEditParams(uri, version, line, character, edited)


class NextEditService:
    def __init__(self, store: DocumentStore, engine: EngineClient, options: Options,
                 encoding: Callable[[], Encoding]) -> None:
        self.store, self.engine, self.options, self.encoding = store, engine, options, encoding
        self.jobs: dict[str, EngineJob] = {}
        self.latest: dict[str, int] = {}
        self.serial = itertools.count(1)
        self.counters: Counter[str] = Counter()
        self.empty_reasons: Counter[str] = Counter()

    @property
    def available(self) -> bool:
        """Whether requests can get suggestions: on, and an engine with a next-edit entry point."""
        return self.options.next_edit.enabled and self.engine.has_next_edit

    async def suggest(self, p: NextEditParams) -> Answer:
        """The suggestions after an edit at `p` (the document's current state)."""
        doc = self.store.get(p.uri)
        enc = self.encoding()
        if not doc.index.is_valid(p.line, p.character, enc):
            raise PositionError(f"position {p.line}:{p.character} is past the end of {p.uri} "
                                f"({doc.index.line_count} lines)")
        serial = next(self.serial)
        self.latest[p.uri] = serial
        self.counters["requests"] += 1
        self._cancel(p.uri, "superseded")
        why = self._refusal(doc, p)
        if why is not None:
            return self._empty(doc.version, why)
        kept = (p.line, p.line)
        if p.edited is not None and abs(p.edited[0] - p.line) <= self.options.next_edit.window_lines:
            kept = (min(p.line, p.edited[0]), max(p.line, p.edited[1]))
        o = self.options.next_edit
        sides = regions(doc.index, kept, o.window_lines, o.max_region_chars)
        if not sides:
            return self._empty(doc.version, "no lines around the edit")
        version, revision, text, index = doc.version, doc.revision, doc.text, doc.index
        found: list[Suggested] = []
        for k, region in enumerate(sides):
            got = await self._run(doc, region, f"ne{serial}.{k}")
            if isinstance(got, str):
                return self._empty(version, got)
            found.extend(got)
            if self.latest.get(p.uri) != serial:
                return self._empty(version, "superseded")
            if self.store.docs.get(p.uri) is not doc or doc.version != version or doc.revision != revision:
                return self._empty(version, "document changed")
        kept_out = [s for s in by_line(text, index, found)
                    if not touches(index, s, kept) and not mangled(text, s)]
        self.counters["answered"] += 1
        self.counters["suggestions"] += len(kept_out)
        return Answer(version, [lsp_suggestion(text, index, s, enc) for s in kept_out])

    def _refusal(self, doc: Document, p: NextEditParams) -> str | None:
        """Why the request gets nothing without reaching the engine, if it does."""
        if not self.options.next_edit.enabled:
            return "next-edit suggestions are off (option nextEdit.enabled)"
        if not self.engine.has_next_edit:
            return "the engine has no next-edit entry point"
        if p.version is not None and p.version != doc.version:
            return f"stale: the request is for version {p.version}, the document is at {doc.version}"
        if not self.options.language_enabled(doc.language_id):
            return "language disabled"
        if (why := doc.unservable_reason()) is not None:
            return why
        if not self.engine.ready:
            return f"engine {self.engine.state}"
        return None

    async def _run(self, doc: Document, region: Region, rid: str) -> list[Suggested] | str:
        """One region's engine job: its suggestions in document offsets, or why none."""
        ctx, o = self.options.context, self.options.next_edit
        prefix, suffix = prompt_around(doc.text, region, ctx.prefix_chars, ctx.suffix_chars)
        req = NextEditRequest(rid, doc.uri, prefix, doc.text[region.start:region.end], suffix,
                              threshold=o.threshold, preset=self.options.mode, max_passes=o.max_passes)
        job = self.engine.next_edit(req)
        if job is None:
            return "the engine has no next-edit entry point"
        self.jobs[doc.uri] = job
        try:
            async for ev, _t in job.events():
                if ev.kind == "error":
                    self.counters["engine_errors"] += 1
                    return f"engine error: {ev.error}"
                if ev.kind == "done":
                    if ev.reason in ("cancelled", "superseded"):
                        return job.cancel_reason or str(ev.reason)
                    return in_document(region, ev.suggestions)
        except asyncio.CancelledError:
            job.cancel("cancelled")  # $/cancelRequest: the client gets RequestCancelled
            self.counters["client_cancelled"] += 1
            raise
        finally:
            if self.jobs.get(doc.uri) is job:
                del self.jobs[doc.uri]
        return "engine stream ended"

    def _cancel(self, uri: str, reason: str) -> None:
        job = self.jobs.pop(uri, None)
        if job is not None:
            job.cancel(reason)

    def _empty(self, version: int | None, why: str) -> Answer:
        self.counters["empty"] += 1
        self.empty_reasons[why.split(":", 1)[0]] += 1
        log.debug("no next edit: %s", why)
        return Answer(version, [], why)

    def document_changed(self, uri: str) -> None:
        """An edit makes a running request's answer stale: stop its engine work now."""
        self._cancel(uri, "document changed")

    def document_closed(self, uri: str) -> None:
        self._cancel(uri, "closed")
        self.latest.pop(uri, None)

    def debug_info(self) -> dict[str, Any]:
        return {"counters": dict(self.counters), "available": self.available,
                "emptyReasons": [{"reason": r, "count": n} for r, n in self.empty_reasons.most_common()]}
