"""Pure text helpers: LSP positions (line, character in the negotiated encoding) to string
offsets and back, and UTF-8 byte offsets for tree-sitter.

Lines end at "\\n" (a "\\r" before it belongs to the line break). Positions past the end of
a line are clamped to the line's end, positions past the last line to the end of the text,
as the LSP specification asks.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from dataclasses import dataclass

Encoding = str  # "utf-8" | "utf-16" | "utf-32"

_NEWLINE = re.compile("\n")


def units(s: str, encoding: Encoding) -> int:
    """Length of `s` in code units of `encoding`."""
    if encoding == "utf-32" or s.isascii():
        return len(s)
    if encoding == "utf-8":
        return len(s.encode("utf-8"))
    return len(s) + sum(1 for ch in s if ord(ch) > 0xFFFF)


def chars_for_units(line: str, n: int, encoding: Encoding) -> int:
    """How many characters of `line` make up its first `n` code units (clamped; a unit
    count that falls inside a character rounds down to that character's start)."""
    if n <= 0:
        return 0
    if encoding == "utf-32" or line.isascii():
        return min(n, len(line))
    used = 0
    for i, ch in enumerate(line):
        c = ord(ch)
        if encoding == "utf-8":
            w = 1 if c < 0x80 else 2 if c < 0x800 else 3 if c < 0x10000 else 4
        else:
            w = 2 if c > 0xFFFF else 1
        if used + w > n:
            return i
        used += w
    return len(line)


@dataclass
class LineIndex:
    """Line start offsets of one text (build once per text version)."""

    text: str
    starts: list[int]

    @classmethod
    def of(cls, text: str) -> LineIndex:
        return cls(text, [0] + [m.end() for m in _NEWLINE.finditer(text)])

    @property
    def line_count(self) -> int:
        return len(self.starts)

    def line_bounds(self, line: int) -> tuple[int, int]:
        """[start, end) of the line's content, without its line break."""
        start = self.starts[line]
        end = self.starts[line + 1] - 1 if line + 1 < len(self.starts) else len(self.text)
        if end > start and self.text[end - 1] == "\r" and end < len(self.text) \
                and self.text[end] == "\n":
            end -= 1
        return start, end

    def line_text(self, line: int) -> str:
        s, e = self.line_bounds(line)
        return self.text[s:e]

    def offset(self, line: int, character: int, encoding: Encoding) -> int:
        """String offset of an LSP position (clamped to the text)."""
        if line < 0:
            return 0
        if line >= len(self.starts):
            return len(self.text)
        s, e = self.line_bounds(line)
        return s + chars_for_units(self.text[s:e], character, encoding)

    def position(self, offset: int, encoding: Encoding) -> tuple[int, int]:
        """LSP (line, character) of a string offset."""
        offset = max(0, min(offset, len(self.text)))
        line = bisect_right(self.starts, offset) - 1
        s, _ = self.line_bounds(line)
        return line, units(self.text[s:offset], encoding)

    def is_valid(self, line: int, character: int, encoding: Encoding) -> bool:
        """Whether the position lies inside the text (not clamped)."""
        if line < 0 or character < 0 or line >= len(self.starts):
            return False
        s, e = self.line_bounds(line)
        return character <= units(self.text[s:e], encoding)


def text_position(text: str, offset: int, encoding: Encoding) -> tuple[int, int]:
    """(line, character) of `offset` inside a small text (a suggestion): for refine edits."""
    before = text[:offset]
    line = before.count("\n")
    col_start = before.rfind("\n") + 1
    return line, units(before[col_start:], encoding)


def byte_offset(text: str, offset: int) -> int:
    return len(text[:offset].encode("utf-8", "surrogatepass"))


def byte_point(text: str, offset: int) -> tuple[int, int]:
    """tree-sitter point (row, byte column) of a string offset."""
    row = text.count("\n", 0, offset)
    col_start = text.rfind("\n", 0, offset) + 1
    return row, len(text[col_start:offset].encode("utf-8", "surrogatepass"))
