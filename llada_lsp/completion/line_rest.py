"""A suggestion in the middle of a line: what of the rest of the line it replaces.

An inline completion item made at a cursor with code after it on the same line replaces the
rest of that line (its range runs from the cursor to the line's end) and its insert text is
the suggestion followed by the part of the rest it keeps. So editors that draw an item with a
range over the line (Neovim 0.12's built-in draws it as an overlay) show exactly what accepting
it gives, and editors that insert at the cursor (VS Code draws the insertion before the kept
text) agree.

What the suggestion overlaps: the closing brackets it adds beyond what it opens close brackets
opened before the cursor. The rest of the line closes those same brackets, so the rest up to
its matching closer is replaced and what follows is kept. A suggestion that closes nothing is
an insertion: the whole rest is kept. One exception, `wraps`: a suggestion of closers alone
before a balanced rest (`max(` typed before `area(5, 6)`, the model closing the call) closes
after the rest, not before it: `max(area(5, 6))`, not `max()area(5, 6)`.
"""

from __future__ import annotations

OPEN_TO_CLOSE = {"(": ")", "[": "]", "{": "}"}
CLOSERS = set(OPEN_TO_CLOSE.values())


def rest_of_line(text: str, offset: int) -> str:
    """The text after `offset` on its line; empty when it is blank (nothing to replace)."""
    end = text.find("\n", offset)
    rest = text[offset: len(text) if end < 0 else end]
    return rest.rstrip("\r") if rest.strip() else ""


def unmatched_closers(text: str) -> list[int]:
    """Offsets in `text` of the closing brackets that close no bracket opened in `text`
    (quoted text skipped; a quote ends at the end of its line)."""
    return _scan(text)[0]


def _scan(text: str) -> tuple[list[int], list[str]]:
    """(the unmatched closers' offsets, the closers still owed for brackets left open)."""
    depth: list[str] = []
    out: list[int] = []
    quote = ""
    for i, ch in enumerate(text):
        if quote:
            if ch == "\n" or (ch == quote and text[i - 1: i] != "\\"):
                quote = ""
            continue
        if ch in "\"'`":
            quote = ch
        elif ch in OPEN_TO_CLOSE:
            depth.append(OPEN_TO_CLOSE[ch])
        elif ch in CLOSERS:
            if depth and depth[-1] == ch:
                depth.pop()
            else:
                out.append(i)
    return out, depth


def kept_rest(text: str, rest: str) -> str:
    """The part of `rest` (the rest of the cursor's line) that `text` inserted at the cursor
    leaves in place."""
    mine = [text[i] for i in unmatched_closers(text)]
    closes = unmatched_closers(rest)[: len(mine)]
    if not closes or [rest[i] for i in closes] != mine[: len(closes)]:
        return rest  # the rest closes nothing the suggestion closes: an insertion
    return rest[closes[-1] + 1:]


def wraps(text: str, rest: str) -> bool:
    """`text` is closers alone and `rest` (non-blank) is balanced: the closers go after the
    rest, closing what the line opened before the cursor around it."""
    if not rest or not text or any(c not in CLOSERS for c in text):
        return False
    closers, owed = _scan(rest)
    return not closers and not owed


def fit(text: str, rest: str) -> str:
    """The insert text of an item whose range runs from the cursor over `rest` (the rest of
    the line, empty: an insertion at the cursor)."""
    if wraps(text, rest):
        code = rest.rstrip()
        return code + text + rest[len(code):]
    return text + kept_rest(text, rest) if rest else text


def only_deletes(text: str, rest: str) -> bool:
    """The suggestion adds nothing but closers that replace code after the cursor: accepting
    it would only delete (such an item is not offered)."""
    return bool(rest) and kept_rest(text, rest) != rest and not text.strip(" \t" + "".join(CLOSERS))
