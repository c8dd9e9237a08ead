"""Workspace context: the chunks of other files a completion's prompt carries before the
document's own prefix (`engine.api.ContextChunk`, placed by `engine.prompt.prompt_format.render_context`).

What goes in, most useful first:
1. the definitions (tree-sitter, `llada_lsp.context.workspace_index`) of the names used on the
   cursor's line, the `NEAR_LINES` lines above it and the `NEAR_BELOW` lines below it that the
   current document does not define, found in the other open documents and in the workspace
   folders (nearest use first);
2. regions of other open documents edited lately (a ring of `RING_SIZE` blocks, as llama.vscode
   keeps one), most recent first;
3. the first block of every other open document not in the ring.
Other open documents count only inside a workspace folder, neither secret nor gitignored, and
of a language the document's can use (`llada_lsp.context.exclusions`); a secret document
gathers nothing.
Blocks lie on a grid of `CHUNK_LINES` lines, so an edit elsewhere in a file moves no other
block. Near-duplicates are dropped (line-set Jaccard >= 0.9 with a kept chunk, or 90% of the
lines already in a kept chunk or in the prompt's own window). The server gathers and ranks;
the engine alone budgets the context, in tokens (`engine.prompt.builder.PromptBuilder.place_context`,
its share `max_context_tokens` in its info). What is gathered is capped by a safety limit
for transport and memory (`gather_limit`: characters, loose enough that the engine always
has more than it places), not a second budget.

Stability (the prompt cache): the prompt places the context before the prefix, so any change
in it costs a full prefill. The chosen tuple is kept per document and handed out again as it
is while (a) no other open document opened, closed or changed, and (b) every definition the
names near the cursor resolve to was already weighed for it. Only then is it built again; a
definition chosen before stays (sticky) while the safety limit allows, after the new ones.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.api import ContextChunk
from llada_lsp.context.exclusions import compatible
from llada_lsp.context.workspace_index import Entry, WorkspaceIndex, path_of
from llada_lsp.text.documents import Document, DocumentStore

CHUNK_LINES = 32  # the grid of blocks taken from open documents
RING_SIZE = 16  # recently edited blocks remembered
NEAR_LINES = 6  # lines above the cursor whose names are looked up
NEAR_BELOW = 3  # lines below the cursor whose names are looked up
MAX_DEFS = 8  # definitions per prompt at most
MAX_PLACES = 6  # a name defined in more places than this is too common to pick one
CHARS_PER_TOKEN = 2  # a conservative estimate (the embedded tokenizer averages ~2.5 on code)
HEADER_CHARS = 16  # the chunk header's comment and the blank line after it
GATHER_CHARS_PER_TOKEN = 8  # the safety limit's characters per token of context (code averages ~2.5)
DUPLICATE = 0.9  # line-set similarity (Jaccard or containment) that drops a chunk
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NOT_CODE = re.compile(r'"(?:\\.|[^"\\\n])*"?|\'(?:\\.|[^\'\\\n])*\'?|#[^\n]*|//[^\n]*')
KEYWORDS = frozenset(
    "and as assert async await break case catch class const continue def default defer del do elif else "
    "end enum except export extends false finally fn for from func function go if impl import in "
    "interface is lambda let local match mod new nil none not null or package pass private protected "
    "pub public raise return self static struct super switch then this throw true try type typeof use "
    "var void while with yield None True False int str float bool string".split())


# -- pure text helpers ----------------------------------------------------------------------------
def names_near(text: str, offset: int, lines_above: int = NEAR_LINES, lines_below: int = NEAR_BELOW) -> list[str]:
    """Identifiers near the cursor, nearest first, each once: the cursor's line (before the
    cursor, then after it), then the lines around it by distance (above before below at the same
    distance). Left out: keywords, one-letter names, the word the cursor touches (it is being
    typed), words in strings and comments (`code_only`), and a single lowercase word used only
    as an attribute (`x.append`: any object's)."""
    line_start = text.rfind("\n", 0, offset) + 1
    line_end = text.find("\n", offset)
    line_end = len(text) if line_end < 0 else line_end
    spans = [(line_start, offset, True), (offset, line_end, False)]
    above, below = line_start - 1, line_end
    for d in range(1, max(lines_above, lines_below) + 1):
        if d <= lines_above and above > 0:
            a = text.rfind("\n", 0, above) + 1
            spans.append((a, above, True))
            above = a - 1
        if d <= lines_below and below < len(text):
            b = text.find("\n", below + 1)
            b = len(text) if b < 0 else b
            spans.append((below + 1, b, False))
            below = b
    lo = min(a for a, _, _ in spans)
    code = code_only(text[lo:max(b for _, b, _ in spans)])
    order: list[str] = []
    plain: set[str] = set()  # names used at least once other than after a dot
    for a, b, backwards in spans:
        found = list(_IDENT.finditer(code, a - lo, b - lo))
        for m in reversed(found) if backwards else found:
            name = m.group()
            if offset - lo in (m.start(), m.end()) or len(name) < 2 or name in KEYWORDS:
                continue
            j = m.start() - 1
            while j >= 0 and code[j] in " \t":
                j -= 1
            if j < 0 or code[j] != ".":
                plain.add(name)
            if name not in order:
                order.append(name)
    return [w for w in order if w in plain or not (w.islower() and "_" not in w)]


def code_only(text: str) -> str:
    """`text` with its one-line string literals and its `#` and `//` comments blanked (same
    length, newlines kept): names there are words, not uses."""
    return _NOT_CODE.sub(lambda m: " " * len(m.group()), text)


def line_set(text: str) -> frozenset[str]:
    """The distinct non-blank lines of `text`, stripped."""
    return frozenset(s for line in text.split("\n") if (s := line.strip()))


def similar(a: frozenset[str], b: frozenset[str]) -> bool:
    """Whether a chunk with lines `a` repeats `b`: Jaccard >= DUPLICATE, or most of `a` is in `b`."""
    if not a:
        return True
    common = len(a & b)
    return common >= DUPLICATE * len(a) or common >= DUPLICATE * len(a | b)


def estimate_tokens(chunk: ContextChunk) -> int:
    """An upper estimate of the tokens a chunk costs in the prompt, header included (reported
    in llada/debugInfo; the engine counts the real ones)."""
    return (len(chunk.path) + len(chunk.text) + HEADER_CHARS) // CHARS_PER_TOKEN + 1


def gather_limit(option_tokens: int, max_context_tokens: int | None) -> int:
    """Characters of context gathered at most: a safety limit for transport and memory, not a
    budget. `GATHER_CHARS_PER_TOKEN` per token of the `contextTokens` option, or of the engine's
    share (`max_context_tokens` in its info) when that is smaller: about three times what the
    engine can place, so its budget in tokens decides what the prompt holds. 0: no context."""
    if max_context_tokens is not None and max_context_tokens >= 0:
        option_tokens = min(option_tokens, max_context_tokens)
    return max(0, option_tokens) * GATHER_CHARS_PER_TOKEN


def block_text(text: str, block: int, lines: int = CHUNK_LINES) -> str:
    """Block `block` of the grid: lines [block*lines, (block+1)*lines) of `text`, stripped of
    blank lines at its ends."""
    parts = text.split("\n", (block + 1) * lines)[block * lines: (block + 1) * lines]
    return "\n".join(parts).strip("\n").rstrip()


def leading_lines(chunk: ContextChunk, chars: int) -> ContextChunk | None:
    """The chunk's leading whole lines within `chars` characters of text; None if not one."""
    end = chunk.text.rfind("\n", 0, chars + 1) if len(chunk.text) > chars else len(chunk.text)
    text = chunk.text[:max(0, end)].rstrip()
    return ContextChunk(chunk.path, text) if text.strip() else None


def gather(candidates: Iterable[ContextChunk], window: str, limit: int) -> tuple[ContextChunk, ...]:
    """Candidates in order, without near-duplicates (of a kept chunk or of the prompt's own
    window), within `limit` characters of text (the safety limit: a chunk over what is left
    is cut to its leading lines, for the engine to place or cut further)."""
    kept: list[ContextChunk] = []
    sets: list[frozenset[str]] = [line_set(window)] if window else []
    used = 0
    for c in candidates:
        if not c.text.strip():
            continue
        lines = line_set(c.text)
        if any(similar(lines, s) for s in sets):
            continue
        if used + len(c.text) > limit:
            cut = leading_lines(c, limit - used)
            if cut is None:
                continue
            c = cut
        kept.append(c)
        sets.append(lines)
        used += len(c.text)
    return tuple(kept)


# -- the chooser --------------------------------------------------------------------------------------
DefKey = tuple[str, str]  # (file key, name)


@dataclass(frozen=True)
class Selection:
    """One document's context as last built, and what it was built from."""

    world: tuple[tuple[tuple[str, int], ...], int]  # other open documents' revisions; index generation
    limit: int
    chunks: tuple[ContextChunk, ...]
    defs: tuple[DefKey, ...]  # definitions chosen, in order
    weighed: frozenset[DefKey]  # definitions considered (chosen or not)


class WorkspaceContext:
    def __init__(self, store: DocumentStore, index: WorkspaceIndex | None = None) -> None:
        self.store = store
        self.index = index or WorkspaceIndex()
        self.ring: OrderedDict[tuple[str, int], None] = OrderedDict()  # (uri, block), newest last
        self.selections: dict[str, Selection] = {}
        self.builds = 0  # selections built (each one may cost the prompt cache)
        self.last: dict[str, Any] = {}
        self._own: dict[str, Entry] = {}  # each document's own entry, for the names it defines

    def set_roots(self, uris: list[str | None]) -> None:
        self.index.set_roots(uris)

    def edited(self, uri: str, lines: Iterable[int]) -> None:
        """A document changed at these (0-based) lines: their blocks join the ring."""
        for line in lines:
            key = (uri, max(0, line) // CHUNK_LINES)
            self.ring[key] = None
            self.ring.move_to_end(key)
        while len(self.ring) > RING_SIZE:
            self.ring.popitem(last=False)

    def closed(self, uri: str) -> None:
        self.selections.pop(uri, None)
        self._own.pop(uri, None)
        self.index.close(uri)
        for key in [k for k in self.ring if k[0] == uri]:
            del self.ring[key]

    def chunks_for(self, doc: Document, offset: int, window: str, limit: int) -> tuple[ContextChunk, ...]:
        """The context of a completion at `offset` in `doc`, ranked; `window`: the prompt's own
        prefix and suffix text (chunks repeating it are dropped); `limit`: the safety limit in
        characters (`gather_limit`)."""
        others = [d for u, d in self.store.docs.items() if u != doc.uri]
        if self.secret(doc.uri):  # nothing is gathered for a secret (and it is not completed)
            self.note(doc.uri, (), False)
            return ()
        self.index.request_scan(doc.language_id)
        if limit <= 0 or (not others and not self.index.files):
            self.note(doc.uri, (), False)
            return ()
        world = (tuple((d.uri, d.revision) for d in others), self.index.generation)
        sel = self.selections.get(doc.uri)
        if sel is not None and sel.world == world and sel.limit == limit \
                and set(self._wanted(doc, offset)) <= sel.weighed:
            self.note(doc.uri, sel.chunks, False)
            return sel.chunks
        usable = self._usable(doc, others)
        self.index.index_open(doc, keep=self.index.usable(path_of(doc.uri)))
        wanted = self._wanted(doc, offset)
        sticky = [k for k in (sel.defs if sel is not None else ()) if k not in wanted]
        order = (wanted + sticky)[:MAX_DEFS]
        defs = [(k, c) for k in order if (c := self._definition_chunk(k, doc.language_id)) is not None]
        chunks = gather([c for _, c in defs] + self._block_chunks(doc.uri, usable), window, limit)
        chosen = tuple(k for k, c in defs if c in chunks)
        self.selections[doc.uri] = Selection(world, limit, chunks, chosen, frozenset(wanted) | frozenset(sticky))
        self.builds += 1
        self.note(doc.uri, chunks, True)
        return chunks

    def secret(self, uri: str) -> bool:
        """Whether a document is a secret (`exclusions.DEFAULT_EXCLUDES` or the user's
        `exclude` patterns): no context is gathered for it, and it is not completed."""
        return self.index.exclusions.secret(path_of(uri))

    def _usable(self, doc: Document, others: list[Document]) -> set[str]:
        """The other open documents that may be context for `doc` (their uris): servable, in
        a workspace folder, neither secret nor ignored (`WorkspaceIndex.usable`), and of a
        compatible language. Those that may be context for no document leave the lookups."""
        out: set[str] = set()
        for d in others:
            key = path_of(d.uri)
            if d.unservable_reason() is not None or not self.index.usable(key):
                self.index.drop_open(key)
                continue
            self.index.index_open(d)
            if compatible(doc.language_id, d.language_id):
                out.add(d.uri)
        return out

    def _wanted(self, doc: Document, offset: int) -> list[DefKey]:
        """The definitions elsewhere of the names near the cursor, nearest use first, in files
        of a compatible language."""
        own_key = path_of(doc.uri)
        own = self._own.get(doc.uri)
        if own is None or own.stamp != (-1, doc.revision):
            own = self._own[doc.uri] = self.index.index_open(doc, keep=False)
        here = Path(own_key).parent
        out: list[DefKey] = []
        for name in names_near(doc.text, offset):
            if own.where(name):
                continue
            places = [(e, i) for e, i in self.index.lookup(name)
                      if e.key != own_key and compatible(doc.language_id, e.language)]
            if not places or len(places) > MAX_PLACES:
                continue
            e, _ = min(places, key=lambda p: _rank(p[0], here, p[1]))
            if (e.key, name) not in out:
                out.append((e.key, name))
        return out

    def _definition_chunk(self, key: DefKey, language: str) -> ContextChunk | None:
        e = self.index.entry(key[0])
        ix = e.where(key[1]) if e is not None else None
        if e is None or not ix or not compatible(language, e.language) or self.index.excluded(e.key):
            return None
        return ContextChunk(self.index.relative(e.key), e.texts[ix[0]])

    def _block_chunks(self, uri: str, usable: set[str]) -> list[ContextChunk]:
        """Recently edited blocks of the other open documents that may be context (`usable`,
        newest first), then the first block of each of them without one."""
        out: list[ContextChunk] = []
        in_ring: set[str] = set()
        for other, block in reversed(self.ring):
            doc = self.store.docs.get(other)
            if other == uri or doc is None or other not in usable:
                continue
            in_ring.add(other)
            out.append(ContextChunk(self.index.relative(path_of(other)), block_text(doc.text, block)))
        for other, doc in self.store.docs.items():
            if other != uri and other not in in_ring and other in usable:
                out.append(ContextChunk(self.index.relative(path_of(other)), block_text(doc.text, 0)))
        return out

    def note(self, uri: str, chunks: tuple[ContextChunk, ...], built: bool) -> None:
        self.last = {"uri": uri, "paths": [c.path for c in chunks],
                     "tokens": sum(estimate_tokens(c) for c in chunks), "built": built}

    def info(self) -> dict[str, Any]:
        """For llada/debugInfo: the last request's context and the index's size."""
        return {**self.last, "builds": self.builds, "indexedFiles": len(self.index.files),
                "openIndexed": len(self.index.opened), "ring": len(self.ring),
                "indexing": self.index.thread is not None and self.index.thread.is_alive()}


def _rank(e: Entry, here: Path, i: int) -> tuple[int, int, str, int]:
    """Which of a name's definitions to show: open documents first, then the same folder, then
    the shortest path; the first in its file."""
    return (0 if e.is_open else 1, 0 if Path(e.key).parent == here else 1, e.key, i)
