"""`llada/nextEdit`: next-edit suggestions after an edit (docs/lsp.md "Next-edit suggestions").

The service keeps, per document, a *base*: the text (and tree) before the edit being made.
A request passes the completion's own checks (`Document.request_offset`, `Document.refusal`),
then compares the base with the current text (`llada_lsp.nextedit.edit_analysis`): the edit's
kind and its follow-up sites. Sites whose content the edit decides become suggestions at once;
the others (an added parameter's argument at each call) are masked infills, one completion
request per site with the edited definition as context, submitted in waves of `FILL_ROWS` (4):
a wave decodes as rows of one step loop (in process and in the daemon), the next goes when it
is done. Fills run only when they are on (`fills`: the threshold at most 1, which the gated
default is not, and an engine that can fill, `Capabilities.next_edit`); with the defaults no
request reaches the engine. A site no fill reaches (fills off, or below the threshold) gets a
placeholder, its name to type over (`nextEdit.placeholders`). Every suggestion
is checked (`llada_lsp.nextedit.edit_window.keep`: off the kept lines, changes something, adds no parse
error), and model fills below `nextEdit.threshold` (the weakest token's confidence) are
dropped. The base moves to the current text when a request finds nothing left to do and the
text parses with no more errors than the base (so a half-typed name keeps the old base).

The parses, the analysis and the checks (`next_edit_work`) run in a worker process
(`edit_process`, `edit_worker`: tree-sitter holds the GIL while it parses), on the texts of the
document and its base, bounded by the limits of `edit_limits` (a refusal answers with its
`limit` and reason): the event loop answers other requests meanwhile.

The newest request for a document wins: it cancels the older one's engine jobs (and its
worker's guard) and the older one answers an empty list with the reason `superseded`; an edit
of the document does the same to a running request (`document changed`), since its answer
would be stale.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from llada_lsp.engines.engine_base import EngineClient, EngineJob
from llada_lsp.nextedit.edit_analysis import Analysis, Site
from llada_lsp.nextedit.edit_limits import Cancelled, Guard
from llada_lsp.nextedit.edit_process import EditProcess
from llada_lsp.nextedit.edit_window import (
    FILL_PREFIX_CHARS,
    FILL_ROWS,
    FILL_SUFFIX_CHARS,
    Suggested,
    fill_request,
    from_fill,
)
from llada_lsp.nextedit.next_edit_work import (
    TYPING_HOLD_S,
    Base,
    Snapshot,
    base_of,
    typing_word,
)
from llada_lsp.options import Options
from llada_lsp.text.documents import Document, DocumentStore
from llada_lsp.text.positions import Encoding
from llada_lsp.text.syntax import parser_for

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
    kind: str = ""  # the edit's kind (llada_lsp.nextedit.edit_analysis)
    detail: str = ""
    limit: str = ""  # the limit that refused the request ("sites", "depth"; edit_limits)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"version": self.version, "suggestions": self.suggestions}
        if self.reason:
            out["reason"] = self.reason
        if self.limit:
            out["limit"] = self.limit
        if self.kind:
            out["kind"], out["detail"] = self.kind, self.detail
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


# The precision gate (bench/next_edit.py, BENCHMARKS.md "Next-edit suggestions"): per model,
# the lowest fill confidence at which the model's own fills are exactly right >= 90% of the time
# (FILLS_OFF: at no threshold), for the models whose suggestions then reach precision >= 0.9
# with recall >= 0.5 over every edit kind and noise edits. `nextEdit.enabled` unset means: on
# for these models, off for the others (not measured). Both embedded models pass on the
# analysis' suggestions and placeholders (precision 1.000, recall 0.995, a placeholder counted
# by its place); neither one's fills reach 0.9 (best: mini-code, 0.231 exact on added
# parameters), so fills stay off by default.
FILLS_OFF = 1.01  # above any confidence: no masked fill is run
GATED: dict[str, float] = {"tiny-code": FILLS_OFF, "mini-code": FILLS_OFF}


def model_name(model: str | None) -> str:
    """The model's short name: the option's, else $LLADA_MODEL's, else the embedded tiny-code."""
    return (model or os.environ.get("LLADA_MODEL") or "tiny-code").rstrip("/").rsplit("/", 1)[-1]


def fill_key(uri: str, row: int) -> str:
    """The document key of the fill in `row` of a wave (each its own: the rows of one wave must
    not supersede each other), so that a newer request of `uri` ends the older one's fills."""
    return f"{uri}\0next-edit\0{row}"


def gated_on(model: str | None) -> bool:
    return model_name(model) in GATED


class NextEditService:
    def __init__(self, store: DocumentStore, engine: EngineClient, options: Options,
                 encoding: Callable[[], Encoding]) -> None:
        self.store, self.engine, self.options, self.encoding = store, engine, options, encoding
        self.guards: dict[str, Guard] = {}  # the running request's, per document
        self.wakers: dict[str, asyncio.Event] = {}  # a request held mid-word, woken by the next edit
        self.changed_at: dict[str, float] = {}  # time.monotonic() of each document's last change
        self.typing_hold_s = TYPING_HOLD_S
        self.worker = EditProcess()  # parses and tree walks, in a process of their own
        self.bases: dict[str, Base] = {}
        self.latest: dict[str, int] = {}
        self.serial = itertools.count(1)
        self.counters: Counter[str] = Counter()
        self.empty_reasons: Counter[str] = Counter()

    @property
    def enabled(self) -> bool:
        """Whether requests get suggestions (`llada/status` nextEdit): the option, or when unset
        the precision gate of the model. The analysis' suggestions need no model; fills also
        need fills on (`_threshold`) and an engine that can fill (`Capabilities.next_edit`),
        checked per request."""
        on = self.options.next_edit.enabled
        return gated_on(self.options.model) if on is None else on

    async def suggest(self, p: NextEditParams) -> Answer:
        """The suggestions after an edit at `p` (the document's current state)."""
        doc = self.store.get(p.uri)
        enc = self.encoding()
        cursor = doc.request_offset(p.line, p.character, enc)  # past the end: PositionError, as completions
        serial = next(self.serial)
        self.latest[p.uri] = serial
        self.counters["requests"] += 1
        self._cancel(p.uri, "superseded")
        why = self._refusal(doc, p)
        if why is not None:
            return self._empty(doc.version, why)
        base = self.bases.get(p.uri)
        if base is None:
            return self._empty(doc.version, "no edit since the document was opened")
        snap, guard = Snapshot.of(doc), Guard()
        self.guards[p.uri] = guard
        try:
            return await self._suggest(p, doc, snap, base, guard, serial, enc, cursor)
        except Cancelled:
            return self._empty(snap.version, guard.reason)
        except asyncio.CancelledError:
            guard.cancel("cancelled")  # $/cancelRequest: the worker stops at its next check
            raise
        finally:
            if self.guards.get(p.uri) is guard:
                del self.guards[p.uri]
            if not self.guards:
                self.worker.bound()  # no request running: a worker past its memory limit is restarted

    async def _suggest(self, p: NextEditParams, doc: Document, snap: Snapshot, base: Base, guard: Guard,
                       serial: int, enc: Encoding, cursor: int) -> Answer:
        got = await self.worker.analyse(p.uri, snap, base, guard)
        guard.check()
        analysis, version = got.analysis, snap.version
        if not analysis.sites:
            if got.settles:
                self.bases[p.uri] = Base(snap.text, None, got.errors)  # settled: the next edit starts here
            if analysis.limit:
                self.counters[f"limit_{analysis.limit}"] += 1
                return self._empty(version, analysis.detail, analysis.limit)
            return self._empty(version, f"no follow-up: {analysis.kind} {analysis.detail}".strip())
        removed = base.text[analysis.edited[0]:len(base.text) - (len(snap.text) - analysis.edited[1])]
        if typing_word(snap.text, cursor, analysis.edited, removed):
            await self._hold(p.uri, guard)  # mid-word: wait until the typing stops for `typing_hold_s`
        self.counters[f"kind_{analysis.kind}"] += 1
        masked = [site for site in analysis.sites if site.prior is None]
        fills: list[Suggested | None] = [None] * len(masked)
        if masked and self.fills:  # fills off (the gate's default), or an engine that cannot: not asked
            filled = await self._fill(doc, analysis, masked, serial)
            if isinstance(filled, str):
                return self._empty(version, filled)
            fills = filled
            if self.latest.get(p.uri) != serial:
                return self._empty(version, "superseded")
            if self.store.docs.get(p.uri) is not doc or doc.version != version or doc.revision != snap.revision:
                return self._empty(version, "document changed")
        # a fill that passed, else (and where it adds a parse error) the name to type over
        kept = (p.line, p.line)
        if p.edited is not None:
            kept = (min(p.line, p.edited[0]), max(p.line, p.edited[1]))
        out = await self.worker.checked(got, fills, self.options.next_edit.placeholders, kept, enc, guard)
        guard.check()
        if got.settles:
            self.bases[p.uri] = Base(snap.text, None, got.errors)  # nothing to follow: settled
        self.counters["answered"] += 1
        self.counters["suggestions"] += len(out)
        return Answer(version, out, "", analysis.kind, analysis.detail)

    async def _fill(self, doc: Document, analysis: Analysis, sites: list[Site], serial: int
                    ) -> list[Suggested | None] | str:
        """The model's fills of `sites` (one job each, submitted together), in site order: each
        one at or above the confidence threshold, None for the others."""
        o = self.options.next_edit
        definition = doc.text[analysis.definition[0]:analysis.definition[1]] if analysis.definition else ""
        done: list[tuple[str, float] | str] = []
        for w in range(0, len(sites), FILL_ROWS):  # waves of the step loop's rows
            jobs = [self.engine.submit(fill_request(
                f"ne{serial}.{k}", fill_key(doc.uri, k - w), doc.uri.rsplit("/", 1)[-1], doc.text, site,
                definition, FILL_PREFIX_CHARS, FILL_SUFFIX_CHARS, o.site_tokens, self.options.mode))
                for k, site in enumerate(sites[w:w + FILL_ROWS], start=w)]
            try:
                done.extend(await asyncio.gather(*(self._done(j) for j in jobs)))
            except asyncio.CancelledError:
                for j in jobs:
                    j.cancel("cancelled")  # $/cancelRequest: the client gets RequestCancelled
                self.counters["client_cancelled"] += 1
                raise
            if self.latest.get(doc.uri) != serial:
                return "superseded"
        out: list[Suggested | None] = []
        threshold = self._threshold()
        for site, got in zip(sites, done, strict=True):
            if isinstance(got, str):
                if got.startswith("engine error"):
                    out.append(None)  # this site goes unfilled (a busy engine refused it); the others stand
                    continue
                return got
            text, conf = got
            s = from_fill(site, text, conf)  # an empty fill suggests nothing
            out.append(s if s is not None and conf >= threshold else None)
        return out

    async def _hold(self, uri: str, guard: Guard) -> None:
        """Wait until `typing_hold_s` after the document's last change; Cancelled at once by
        the next edit or request (the guard)."""
        left = self.typing_hold_s - (time.monotonic() - self.changed_at.get(uri, 0.0))
        if left <= 0:
            return
        self.counters["held_typing"] += 1
        woken = self.wakers.setdefault(uri, asyncio.Event())
        try:
            await asyncio.wait_for(woken.wait(), left)
        except TimeoutError:
            pass
        finally:
            if self.wakers.get(uri) is woken and not woken.is_set():
                del self.wakers[uri]
        guard.check()

    def _refusal(self, doc: Document, p: NextEditParams) -> str | None:
        """Why the request gets nothing without reaching the engine, if it does."""
        if not self.enabled:
            return "next-edit suggestions are off (option nextEdit.enabled; the model is below the precision gate)"
        if p.version is not None and p.version != doc.version:
            return f"stale: the request is for version {p.version}, the document is at {doc.version}"
        if (why := doc.refusal(self.options.language_enabled(doc.language_id))) is not None:
            return why  # the completion's own check
        if parser_for(doc.language_id) is None:
            return "no grammar for the language"
        if not self.engine.ready:
            return f"engine {self.engine.state}"
        return None

    @property
    def fills(self) -> bool:
        """Whether masked sites go to the engine: fills are on (a threshold at most 1) and the
        engine can fill them (`Capabilities.next_edit`: its done event reports the fill's
        confidence; SGLang's does not, so its fills could never pass the threshold)."""
        return self._threshold() <= 1.0 and self.engine.caps.next_edit

    def _threshold(self) -> float:
        """The fill threshold: the option's, else the model's gated one (0.9 unmeasured)."""
        o = self.options.next_edit.threshold
        return o if o is not None else GATED.get(self._model(), 0.9)

    def _model(self) -> str:
        return model_name(self.options.model)

    async def _done(self, job: EngineJob) -> tuple[str, float] | str:
        async for ev, _t in job.events():
            if ev.kind == "error":
                self.counters["engine_errors"] += 1
                return f"engine error: {ev.error}"
            if ev.kind == "done":
                if ev.reason in ("cancelled", "superseded"):
                    return job.cancel_reason or str(ev.reason)
                # an engine without per-token confidence (SGLang) gives 0: its fills never pass
                return ev.text, float((ev.stats or {}).get("min_confidence", 0.0))
        return "engine stream ended"

    def _cancel(self, uri: str, reason: str) -> None:
        guard = self.guards.pop(uri, None)
        if guard is not None:
            guard.cancel(reason)  # the worker's analysis or check stops at its next step
        woken = self.wakers.pop(uri, None)
        if woken is not None:
            woken.set()  # a request held while a word is typed ends now
        for row in range(FILL_ROWS):  # its fills: the engine client's one rule ends them
            self.engine.supersede(fill_key(uri, row), reason)

    def _empty(self, version: int | None, why: str, limit: str = "") -> Answer:
        self.counters["empty"] += 1
        self.empty_reasons[why.split(":", 1)[0] if not limit else f"{limit} limit"] += 1
        log.debug("no next edit: %s", why)
        return Answer(version, [], why, limit=limit)

    def document_changing(self, doc: Document) -> None:
        """Before an edit is applied: the text as it stands becomes the base when there is none."""
        if doc.uri in self.bases or not self.enabled or doc.tree is None or doc.unservable_reason() is not None:
            return
        self.bases[doc.uri] = base_of(doc)  # no parse on the loop: the worker parses it now
        self.worker.prime(doc.uri, doc.language_id, doc.text)

    def document_changed(self, uri: str) -> None:
        """An edit makes a running request's answer stale: stop its engine work now."""
        self.changed_at[uri] = time.monotonic()
        self._cancel(uri, "document changed")

    def document_closed(self, uri: str) -> None:
        self._cancel(uri, "closed")
        self.latest.pop(uri, None)
        self.bases.pop(uri, None)
        self.changed_at.pop(uri, None)
        self.worker.closed(uri)

    def debug_info(self) -> dict[str, Any]:
        return {"counters": dict(self.counters), "available": self.enabled, "fills": self.fills,
                "running": len(self.guards),  # requests being analysed or checked by the worker now
                "workerStarts": self.worker.starts, "workerMemoryRestarts": self.worker.memory_restarts,
                "workerResyncs": self.worker.resyncs,
                "emptyReasons": [{"reason": r, "count": n} for r, n in self.empty_reasons.most_common()]}
