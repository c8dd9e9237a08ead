"""Suggestion cache (LRU on prefix/suffix hashes) and type-through.

Type-through: after a suggestion was shown at offset `anchor`, a request at `anchor + k`
whose document differs from the shown one only by the first k characters of the
suggestion typed at the anchor is served the rest of the suggestion, with no engine call.
The editor may still display a version the server has since refined (a refinement and a
keystroke cross on the wire), so the typed characters are matched against the current
text first, then against the earlier versions.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from dataclasses import dataclass, field


def key_of(prefix: str, suffix: str, kind: str) -> str:
    h = hashlib.blake2b(digest_size=16)
    for part in (kind, prefix, suffix):
        h.update(len(part).to_bytes(8, "little"))
        h.update(part.encode("utf-8", "surrogatepass"))
    return h.hexdigest()


class SuggestionCache:
    def __init__(self, size: int = 256) -> None:
        self.size = size
        self._data: OrderedDict[str, str] = OrderedDict()
        self._others: dict[str, tuple[str, ...]] = {}  # the other candidates of a key, if any
        self._decoded: dict[str, int] = {}  # how many candidates the engine decoded for a key
        self.hits = 0
        self.misses = 0

    def get(self, key: str) -> str | None:
        value = self._data.get(key)
        if value is None:
            self.misses += 1
            return None
        self._data.move_to_end(key)
        self.hits += 1
        return value

    def put(self, key: str, value: str, others: tuple[str, ...] = (), decoded: int = 1) -> None:
        """Store the text shown for `key`, the other candidates worth cycling to, and how
        many candidates were decoded to find them."""
        if self.size <= 0:
            return
        self._data[key] = value
        self._data.move_to_end(key)
        self._others[key], self._decoded[key] = others, decoded
        while len(self._data) > self.size:
            old, _ = self._data.popitem(last=False)
            self._others.pop(old, None)
            self._decoded.pop(old, None)

    def others(self, key: str) -> tuple[str, ...]:
        """The other candidates stored with `key` (no hit or miss counted)."""
        return self._others.get(key, ())

    def decoded(self, key: str) -> int:
        """How many candidates the engine decoded for `key` (0: not cached)."""
        return self._decoded.get(key, 0)

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key: object) -> bool:
        return key in self._data  # no hit or miss counted


@dataclass
class Shown:
    """The last suggestion shown for a document."""

    completion_id: str
    anchor: int  # document offset the suggestion is inserted at
    text: str  # the suggestion as it stands now (refinements update it)
    before_tail: str  # up to 256 characters before the anchor, when shown
    after: str  # up to 256 characters after the anchor, when shown
    doc_len: int  # document length when shown
    kind: str = "line"
    earlier: list[str] = field(default_factory=list)  # versions before refinements, newest last

    def refine(self, text: str) -> None:
        """A refinement replaced the text; the editor may still show the old one a while."""
        if text != self.text:
            self.earlier = [*self.earlier, self.text][-EARLIER:]
            self.text = text


TAIL = 256
EARLIER = 4


def remember(completion_id: str, doc_text: str, anchor: int, text: str, kind: str) -> Shown:
    return Shown(completion_id, anchor, text, doc_text[max(0, anchor - TAIL):anchor],
                 doc_text[anchor: anchor + TAIL], len(doc_text), kind)


def type_through(shown: Shown | None, doc_text: str, offset: int) -> str | None:
    """The rest of the shown suggestion if the user typed its first characters, else None:
    of its current text, or else of the newest earlier version that matches."""
    if shown is None:
        return None
    k = offset - shown.anchor
    if k <= 0 or len(doc_text) != shown.doc_len + k:
        return None
    if doc_text[max(0, shown.anchor - TAIL): shown.anchor] != shown.before_tail:
        return None
    if doc_text[offset: offset + TAIL] != shown.after:
        return None
    typed = doc_text[shown.anchor: offset]
    versions = [shown.text, *reversed(shown.earlier)]
    if typed in versions:
        return None  # a version typed or accepted whole: done (not the tail of a longer one)
    for text in versions:
        if k < len(text) and text[:k] == typed:
            rest = text[k:]
            return rest if rest.strip() else None
    return None
