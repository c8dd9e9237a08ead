"""The parse-error guard: no suggestion is shown if accepting it adds a parse error.

Every path that shows a text (the first answer and its candidates, each `llada/refine`, a
type-through or cached answer, a speculation) asks one `Guard`. It applies the suggestion as
accepting it would (at the cursor, over the part of the rest of the line its item replaces:
`llada_lsp.completion.line_rest`), reparses with the document's tree-sitter grammar and
compares the errors with the document's own (`llada_lsp.text.edit_check.edit_adds_error`): errors
the file already has elsewhere do not count, so a file that is being typed still gets
suggestions. A text that fails is cut to the longest prefix that passes, at a line end or
just after a closing bracket or quote (`cut`), or shows nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from llada_lsp.completion.line_rest import kept_rest, wraps
from llada_lsp.text.edit_check import edit_adds_error, edit_error_spans

_CLOSED = re.compile(r"[)\]}\"'`]")
MAX_CUTS = 24  # parses one cut may cost


@dataclass(frozen=True)
class Guard:
    """The check for suggestions at `offset` of `text` (the document a suggestion completes);
    `rest`: the rest of the cursor's line its item replaces; `tree`: the tree of `text`, None
    for no check (no grammar, or `syntaxCheck` off)."""

    language_id: str
    text: str
    offset: int
    rest: str = ""
    tree: Any = None

    @property
    def active(self) -> bool:
        return self.tree is not None

    def _parts(self, suggestion: str) -> tuple[str, str, str]:
        """(before, removed, after) of the document around what accepting `suggestion` replaces."""
        if wraps(suggestion, self.rest):  # closers placed after the rest (line_rest.fit)
            end = self.offset + len(self.rest.rstrip())
            return self.text[:end], "", self.text[end:]
        replaced = len(self.rest) - len(kept_rest(suggestion, self.rest)) if self.rest else 0
        end = self.offset + replaced
        return self.text[: self.offset], self.text[self.offset: end], self.text[end:]

    def breaks(self, suggestion: str) -> bool:
        """Whether accepting `suggestion` adds a parse error (False when not active)."""
        if not self.active or not suggestion:
            return False
        before, removed, after = self._parts(suggestion)
        return edit_adds_error(self.language_id, self.tree, before, suggestion, after, removed)

    def spans(self, suggestion: str) -> list[tuple[int, int]]:
        """Character spans of `suggestion` inside the parse errors it adds ([]: none)."""
        if not self.active or not suggestion:
            return []
        before, removed, after = self._parts(suggestion)
        return edit_error_spans(self.language_id, self.tree, before, suggestion, after, removed)

    def fits(self, suggestion: str) -> bool:
        return bool(suggestion.strip()) and not self.breaks(suggestion)

    def cut(self, suggestion: str) -> str:
        """`suggestion` when it passes, else its longest cut (`cuts`) that does (at most
        `MAX_CUTS` tries); "" when none does."""
        if not self.breaks(suggestion):
            return suggestion
        tries = 0
        for cand in cuts(suggestion):
            tries += 1
            if tries > MAX_CUTS:
                break
            if not self.breaks(cand):
                return cand
        return ""


def _closed(line: str) -> list[int]:
    """Ends of `line`'s prefixes that close something (a bracket or a string), longest first:
    a cut there is a whole expression, not a dangling name or operator."""
    return [m.end() for m in reversed(list(_CLOSED.finditer(line)))]


def cuts(text: str) -> list[str]:
    """Non-blank proper prefixes of `text`, longest first, that end a line, or end the last
    or the first line's prefix just after a closing bracket or quote; trailing blanks dropped."""
    lines = text.split("\n")
    head = "\n".join(lines[:-1]) + "\n" if len(lines) > 1 else ""
    out = [(head + lines[-1][:e]).rstrip() for e in _closed(lines[-1])]
    out += ["\n".join(lines[:n]).rstrip() for n in range(len(lines) - 1, 0, -1)]
    if len(lines) > 1:
        out += [lines[0][:e].rstrip() for e in _closed(lines[0])]
    return [c for c in dict.fromkeys(out) if c.strip() and c != text]
