"""Speculative completion after an accept.

When the client reports an accept (`llada.acceptCompletion` with the completion id), the
document soon holds the suggestion inserted at its anchor (the didChange may come before or
after the command). Once it does, the completion at the new cursor (the end of the inserted
text) is requested from the engine right away; its final text goes into the suggestion cache
under the key the next request will compute, so that request is answered without an engine
call. A request arriving while the speculation still runs waits for it instead of starting
a second engine job. Any other edit of the document drops the pending accept; a newer engine
request for the document supersedes a running speculation.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from llada_lsp.completion.cache import TAIL, Shown, SuggestionCache, key_of
from llada_lsp.completion.plans import InfillPlan, make_plan
from llada_lsp.options import Options
from llada_lsp.text.documents import Document, DocumentStore

log = logging.getLogger(__name__)

# cid -> (uri, what was shown, the texts answered): the service's recent completions
Recent = Mapping[str, tuple[str, Shown, tuple[str, ...]]]


@dataclass(frozen=True)
class Ahead:
    """A completion to decode ahead of time: the plan at `offset` of `doc` as it stands."""

    doc: Document
    offset: int
    cid: str
    plan: InfillPlan
    key: str
    tree: Any
    t0: float


# decodes an `Ahead` into the suggestion cache; its final text (None: nothing)
Decode = Callable[[Ahead], Awaitable[str | None]]


@dataclass(frozen=True)
class Accept:
    """A suggestion the client accepted: where it was shown and what may have been inserted
    (its text as refined, or the first answer for clients that ignore refinements)."""

    uri: str
    anchor: int
    before_tail: str
    after: str
    doc_len: int
    texts: tuple[str, ...]

    @classmethod
    def of(cls, uri: str, shown: Shown, *answered: str) -> Accept:
        """`answered`: the texts the client got (the first answer, other candidates)."""
        texts = tuple(dict.fromkeys(t for t in (shown.text, *answered) if t))
        return cls(uri, shown.anchor, shown.before_tail, shown.after, shown.doc_len, texts)

    def cursor_after(self, doc_text: str) -> int | None:
        """The cursor offset after the insertion if `doc_text` is the shown document with one
        of the texts inserted at the anchor; else None."""
        a = self.anchor
        if doc_text[max(0, a - TAIL): a] != self.before_tail:
            return None
        for text in self.texts:
            end = a + len(text)
            if len(doc_text) == self.doc_len + len(text) and doc_text[a:end] == text \
                    and doc_text[end: end + TAIL] == self.after:
                return end
        return None


class Speculator:
    """`ready`: whether the engine takes requests; `recent`: the completions answered lately;
    `decode`: runs one completion to its end into `cache` (the service's settle and rescue)."""

    def __init__(self, store: DocumentStore, cache: SuggestionCache, options: Options,
                 counters: Counter[str], recent: Recent, ready: Callable[[], bool],
                 decode: Decode) -> None:
        self.store, self.cache, self.options, self.counters = store, cache, options, counters
        self.recent, self.ready, self.decode = recent, ready, decode
        self.pending: dict[str, Accept] = {}  # uri -> accepted, insertion not seen yet
        self.futures: dict[str, asyncio.Future[str | None]] = {}  # cache key -> final text
        self.tasks: set[asyncio.Task[None]] = set()
        self.serial = 0

    def accepted(self, cid: str) -> None:
        found = self.recent.get(cid)
        if found is None:
            log.debug("accept of unknown completion %s", cid)
            return
        uri, shown, answered = found
        self.pending[uri] = Accept.of(uri, shown, *answered)
        self.document_changed(uri, from_accept=True)

    def document_changed(self, uri: str, closed: bool = False, from_accept: bool = False) -> None:
        acc = self.pending.get(uri)
        if acc is None:
            return
        doc = self.store.docs.get(uri)
        if closed or doc is None:
            self.pending.pop(uri, None)
            return
        cursor = acc.cursor_after(doc.text)
        if cursor is None:
            if not from_accept:  # an edit other than the insertion: the accept is stale
                self.pending.pop(uri, None)
                self.counters["speculation_dropped"] += 1
            return
        del self.pending[uri]
        self.start(uri, cursor)

    def start(self, uri: str, offset: int) -> None:
        """Request the completion at `offset` of the current document into the cache."""
        doc = self.store.docs.get(uri)
        if doc is None or not self.ready() or doc.unservable_reason() is not None \
                or not self.options.language_enabled(doc.language_id):
            self.counters["speculation_skipped"] += 1
            return
        t0 = time.perf_counter()
        tree = doc.syntax_tree()
        plan = make_plan(doc.text, offset, doc.language_id, self.options, tree=tree,
                         index=doc.index)
        if plan.kind == "none" or plan.engine_plan is None:
            self.counters["speculation_skipped"] += 1
            return
        key = key_of(plan.prefix, plan.suffix, plan.kind)
        if key in self.cache or key in self.futures:
            self.counters["speculation_known"] += 1
            return
        self.serial += 1
        cid = f"s{self.serial}"
        fut: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()
        self.futures[key] = fut
        self.counters["speculated"] += 1
        decoding = self.decode(Ahead(doc, offset, cid, plan, key, tree, t0))  # submits now

        async def run() -> None:
            text: str | None = None
            try:
                text = await decoding
                if text is not None:
                    self.counters["speculation_done"] += 1
            finally:
                self.futures.pop(key, None)
                if not fut.done():
                    fut.set_result(text)

        task = asyncio.ensure_future(run())
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def wait_for(self, key: str) -> str | None:
        """The running speculation's text for `key` (None: none runs, or it gave nothing)."""
        fut = self.futures.get(key)
        if fut is None:
            return None
        return await asyncio.shield(fut)

    def running(self) -> int:
        return len(self.futures)
