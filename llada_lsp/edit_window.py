"""Pure text helpers of `llada/nextEdit`: which lines around an edit go to the model as a
draft, and the engine's suggestions mapped back onto the document.

The lines being edited (the cursor's line, and the lines of the edited range when the client
sends one: the `kept` lines) stay out of every region: the user is typing there, and a
suggestion that rewrote them would fight the keystrokes. They remain in the prompt as text.
So a window is two regions, one on each side of the kept lines, each asked for on its own
(engine passes read the whole region as one draft, which must be contiguous): first the lines
below (where the follow-ups of a definition's change are), then the lines above (a call's
change whose definition precedes it). Each side holds at most `window_lines` lines and
`max_chars` characters; the lines farthest from the edit are left out first.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine.api import EditSuggestion
from llada_lsp.positions import Encoding, LineIndex


@dataclass(frozen=True)
class Region:
    """text[start:end]: whole lines `first`..`last` on one side ("below" or "above") of the
    kept lines."""

    side: str
    start: int
    end: int
    first: int
    last: int


@dataclass(frozen=True)
class Suggested:
    """One suggestion in document offsets: replace text[start:end] by `text`."""

    start: int
    end: int
    text: str
    confidence: float


def line_end(index: LineIndex, line: int) -> int:
    """The offset just past `line`'s line break (the text's end for the last line)."""
    return index.start(line + 1) if line + 1 < index.line_count else len(index.text)


def regions(index: LineIndex, kept: tuple[int, int], window_lines: int, max_chars: int) -> list[Region]:
    """The regions around the kept lines [first, last], below first; a side with nothing but
    whitespace in it is left out."""
    text, n = index.text, index.line_count
    first, last = max(0, kept[0]), min(n - 1, kept[1])
    out: list[Region] = []
    lo, hi = last + 1, min(n - 1, last + window_lines)
    while lo <= hi and line_end(index, hi) - index.start(lo) > max_chars:
        hi -= 1  # the farthest line goes first
    if lo <= hi:
        out.append(Region("below", index.start(lo), line_end(index, hi), lo, hi))
    lo, hi = max(0, first - window_lines), first - 1
    while lo <= hi and line_end(index, hi) - index.start(lo) > max_chars:
        lo += 1
    if lo <= hi:
        out.append(Region("above", index.start(lo), line_end(index, hi), lo, hi))
    return [r for r in out if text[r.start:r.end].strip()]


def prompt_around(text: str, region: Region, prefix_chars: int, suffix_chars: int) -> tuple[str, str]:
    """The prefix and suffix of `region`: at most `prefix_chars` / `suffix_chars` characters,
    cut at line boundaries (a bounded prefix starts at a line's start, a bounded suffix ends
    after a line break) unless one line alone is longer."""
    a = max(0, region.start - prefix_chars)
    if a > 0:
        nl = text.find("\n", a, region.start)
        a = nl + 1 if nl >= 0 else a
    b = min(len(text), region.end + suffix_chars)
    if b < len(text):
        nl = text.rfind("\n", region.end, b)
        b = nl + 1 if nl >= 0 else b
    return text[a:region.start], text[region.end:b]


def in_document(region: Region, suggestions: tuple[EditSuggestion, ...]) -> list[Suggested]:
    """The engine's suggestions (offsets into the region) as document offsets, in order."""
    return sorted((Suggested(region.start + s.start, region.start + s.end, s.text, s.confidence)
                   for s in suggestions), key=lambda s: (s.start, s.end))


def by_line(text: str, index: LineIndex, found: list[Suggested]) -> list[Suggested]:
    """Suggestions that meet on a line merge into one (the text between them kept), so that a
    line has at most one: what the editors show as one diff and accept at once."""
    out: list[Suggested] = []
    for s in sorted(found, key=lambda s: (s.start, s.end)):
        if out and index.line_of(s.start) == index.line_of(out[-1].end) and s.start >= out[-1].end:
            p = out[-1]
            out[-1] = Suggested(p.start, s.end, p.text + text[p.end:s.start] + s.text,
                                min(p.confidence, s.confidence))
        else:
            out.append(s)
    return out


def touches(index: LineIndex, s: Suggested, kept: tuple[int, int]) -> bool:
    """Whether the suggestion's range meets a kept line (replacing the line break before a
    kept line joins it, so that counts)."""
    a, b = index.line_of(s.start), index.line_of(s.end)
    return a <= kept[1] and b >= kept[0]


def mangled(text: str, s: Suggested) -> bool:
    """Whether the suggestion writes a replacement character the text did not have there (a
    byte-level token that splits a character: never meant as code)."""
    return "\ufffd" in s.text and "\ufffd" not in text[s.start:s.end]


def lsp_suggestion(text: str, index: LineIndex, s: Suggested, enc: Encoding) -> dict[str, Any]:
    """The wire form: {range, newText, oldText, confidence, line} (line: the range's start line)."""
    (l1, c1), (l2, c2) = index.position(s.start, enc), index.position(s.end, enc)
    return {"range": {"start": {"line": l1, "character": c1}, "end": {"line": l2, "character": c2}},
            "newText": s.text, "oldText": text[s.start:s.end], "confidence": round(s.confidence, 6),
            "line": l1}
