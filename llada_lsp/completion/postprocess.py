"""Post-processing of engine text (pure): duplicate and junk filters, brackets.

`clean(raw, spec)` returns the suggestion to show ("" to show nothing) and why it changed.
The stop rule is not applied here: every engine text arrives cut at its plan's stop rule, by
the engine (`engine.decoding.stops`, the one place; the SGLang client applies it for servers
that cannot).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from llada_lsp.completion.context import indentation

OPEN_TO_CLOSE = {"(": ")", "[": "]", "{": "}"}
CLOSE_TO_OPEN = {v: k for k, v in OPEN_TO_CLOSE.items()}
_CLOSER_LINE = re.compile(r"^[\s)\]}]*[)\]}][\s)\]};,]*$|^\s*end\b[\s)]*$")
_CHAR_REPEAT = re.compile(r"(.{1,4}?)\1{7,}", re.S)
_STRAY_CLOSER = re.compile(r'"""|\'\'\'|[)\]}]+[,;]?')
_TERMINAL = re.compile(r"^(return|raise|throw|continue|break)\b")


@dataclass(frozen=True)
class Spec:
    """What the post-processor needs to know about the cursor."""

    kind: str  # "line" | "statements" | "block"
    left: str  # text of the cursor's line before the cursor
    suffix: str  # document text after the cursor
    line_above: str = ""  # the nearest non-blank line above the cursor's line
    brace: bool = False
    keep_closer: bool = False
    prefix_open: str = ""  # brackets open at the cursor (innermost last), e.g. "({"


def open_brackets(text: str) -> str:
    """Brackets left open at the end of `text` (quotes and comments ignored: heuristic)."""
    stack: list[str] = []
    for ch in text:
        if ch in OPEN_TO_CLOSE:
            stack.append(ch)
        elif ch in CLOSE_TO_OPEN:
            if stack and stack[-1] == CLOSE_TO_OPEN[ch]:
                stack.pop()
    return "".join(stack)


def balance_brackets(text: str, spec: Spec) -> str:
    """Cut where the text closes a bracket it did not open (unless that closer is wanted)."""
    stack: list[str] = []
    quote = ""
    prefix_open = list(spec.prefix_open)
    rest_of_line = spec.suffix.split("\n", 1)[0].strip()
    for i, ch in enumerate(text):
        if quote:
            if ch == quote and text[i - 1: i] != "\\":
                quote = ""
            elif ch == "\n":
                quote = ""
            continue
        if ch in "\"'`":
            quote = ch
        elif ch in OPEN_TO_CLOSE:
            stack.append(ch)
        elif ch in CLOSE_TO_OPEN:
            if stack and stack[-1] == CLOSE_TO_OPEN[ch]:
                stack.pop()
                continue
            if spec.kind == "line":
                if not rest_of_line.startswith(ch) and prefix_open and \
                        prefix_open[-1] == CLOSE_TO_OPEN[ch]:
                    prefix_open.pop()
                    continue
                return text[:i]
            line_start = text.rfind("\n", 0, i) + 1
            if spec.brace and spec.keep_closer and ch == "}":
                end = text.find("\n", i)
                return text if end < 0 else text[:end]
            if not text[line_start:i].strip():
                return text[:line_start].rstrip(" \t")
            return text[:i]
    return text


def _drop_closer_the_suffix_has(text: str, suffix: str) -> str:
    lines = text.rstrip().split("\n")
    if len(lines) < 2:
        return text
    last = lines[-1].strip()
    nxt = next((s.strip() for s in suffix.split("\n") if s.strip()), "")
    if last and _CLOSER_LINE.match(lines[-1]) and nxt.startswith(last):
        return "\n".join(lines[:-1])
    return text


def _cut_echoed_suffix(text: str, suffix: str) -> str:
    """Cut the text before a later line that repeats the first non-blank line below the cursor's
    line: the model wrote the middle and went on with the code that already follows (chat
    checkpoints, prompted with the suffix, do this)."""
    below = next((s.strip() for s in suffix.split("\n")[1:] if s.strip()), "")
    if len(below) < 4:
        return text
    lines = text.split("\n")
    for i in range(1, len(lines)):
        if lines[i].strip() == below:
            return "\n".join(lines[:i]).rstrip(" \t")
    return text


def _cut_repetition(text: str) -> str:
    m = _CHAR_REPEAT.search(text)
    if m is not None and m.group(1).strip():
        text = text[: m.start() + len(m.group(1))]
    lines = text.split("\n")
    out: list[str] = []
    for line in lines:
        if len(out) >= 2 and line.strip() and line == out[-1] == out[-2]:
            break
        out.append(line)
    return "\n".join(out)


def _repeats_neighbours(text: str, spec: Spec) -> str | None:
    first = (spec.left + text.split("\n", 1)[0]).strip()
    whole = text.strip()
    nxt_lines = [s.strip() for s in spec.suffix.split("\n")]
    rest_of_line = nxt_lines[0] if nxt_lines else ""
    next_line = next((s for s in nxt_lines[1:] if s), "")
    if spec.line_above.strip() and first == spec.line_above.strip() and len(first) > 2:
        return "repeats the line above"
    if next_line and (first == next_line or whole == next_line) and len(first) > 2:
        return "repeats the next line"
    sfx = spec.suffix.lstrip()
    if whole and len(whole) > 2 and sfx.startswith(whole):
        return "repeats the suffix"
    if rest_of_line and whole == rest_of_line:
        return "repeats the suffix"
    return None


def _drop_echoed_closer(text: str, spec: Spec) -> str:
    """At the start of a fresh line, a first line that only repeats how the line above ends
    (a docstring's closing quotes, a closing bracket) is the model echoing it: drop it."""
    if spec.kind == "line" or spec.left.strip():
        return text
    first, sep, rest = text.partition("\n")
    closer = first.strip()
    if sep and _STRAY_CLOSER.fullmatch(closer) and spec.line_above.rstrip().endswith(closer) \
            and rest.strip():
        return rest.lstrip(" \t\n")
    return text


def _cut_unreachable(text: str, spec: Spec) -> str:
    """Cut the lines after a complete return/raise/throw/continue/break that sit at its
    indentation or deeper: they can never run (a small model repeats such a line). A line
    of closing brackets (or `end`) after it closes the scope and is kept."""
    if spec.kind == "line":
        return text
    lines = text.split("\n")
    first_indent = len(spec.left) if not spec.left.strip() else len(indentation(spec.left))
    indents = [first_indent] + [len(indentation(ln)) for ln in lines[1:]]
    for i, line in enumerate(lines):
        code = (spec.left + line).strip() if i == 0 else line.strip()
        if not _TERMINAL.match(code) or open_brackets(code) or code.endswith(("\\", ",")):
            continue
        nxt = next((j for j in range(i + 1, len(lines)) if lines[j].strip()), None)
        if nxt is not None and indents[nxt] >= indents[i] and not _CLOSER_LINE.match(lines[nxt]):
            return "\n".join(lines[: i + 1])
    return text


def clean(raw: str, spec: Spec) -> tuple[str, str]:
    """(suggestion, note). An empty suggestion means: show nothing (note says why)."""
    text = raw.replace("\r\n", "\n")
    if spec.left and not spec.left.strip():  # the cursor sits after the indentation
        text = text.lstrip(" \t")
    text = _drop_echoed_closer(text, spec)
    text = _cut_echoed_suffix(text, spec.suffix)
    text = balance_brackets(text, spec)
    text = _cut_repetition(text)
    text = _cut_unreachable(text, spec)
    text = _drop_closer_the_suffix_has(text, spec.suffix)
    if spec.kind != "line":
        text = "\n".join(line.rstrip() for line in text.split("\n")).rstrip()
        if not text.strip("\n").strip():
            return "", "whitespace only"
    else:
        text = text.rstrip("\r")
        if spec.suffix.split("\n", 1)[0].strip() == "":
            text = text.rstrip()
    if not text.strip():
        return "", "whitespace only"
    why = _repeats_neighbours(text, spec)
    if why is not None:
        return "", why
    return text, "" if text == raw else "trimmed"


def syntax_trim(text: str, adds_error: object) -> tuple[str, str]:
    """Keep the longest line-prefix of `text` that adds no parse error (`adds_error(text)`
    is a callable returning bool); at most 4 shorter candidates are tried."""
    check = adds_error  # a callable; typed loosely to keep this module free of tree-sitter
    if not callable(check) or not check(text):
        return text, ""
    lines = text.split("\n")
    for n in range(len(lines) - 1, max(0, len(lines) - 5), -1):
        cand = "\n".join(lines[:n]).rstrip()
        if cand.strip() and not check(cand):
            return cand, "trimmed to parse"
    # a first line that only closes what is already closed (a docstring's quotes, a bracket)
    # is the model echoing the line above; what follows it may stand on its own
    if len(lines) > 1 and _STRAY_CLOSER.fullmatch(lines[0].strip()) and lines[1].strip():
        cand = "\n".join([lines[1].lstrip(), *lines[2:]]).rstrip()
        if not check(cand):
            return cand, "dropped a stray closing line"
    return "", "adds a parse error"


def first_fitting(candidates: list[str], adds_error: Callable[[str], bool] | None) -> int:
    """Which of the engine's candidates to show (the primary first, then its alternatives in
    rank order): the first non-empty one that adds no parse error; failing that, the first
    non-empty one; 0 when all are empty. `adds_error` None: no syntax check, the first
    non-empty one."""
    nonempty = [i for i, c in enumerate(candidates) if c.strip()]
    if not nonempty:
        return 0
    if adds_error is not None:
        for i in nonempty:
            if not adds_error(candidates[i]):
                return i
    return nonempty[0]


def raw_spans(raw: str, cleaned: str, spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Map character spans of `cleaned` (what `clean` made of `raw`) back onto `raw`.

    `clean` only deletes characters (leading indentation, "\\r", trailing spaces of lines) and
    cuts the end, so `cleaned` is a subsequence of `raw`: a greedy match aligns them."""
    pos: list[int] = []
    j = 0
    for ch in cleaned:
        while j < len(raw) and raw[j] != ch:
            j += 1
        if j >= len(raw):  # not a subsequence (cannot happen with `clean`): stop mapping
            break
        pos.append(j)
        j += 1
    out: list[tuple[int, int]] = []
    for s, e in spans:
        s, e = max(0, s), min(e, len(pos))
        if s < e:
            out.append((pos[s], pos[e - 1] + 1))
    return out


def remask_can_help(text: str, spans: list[tuple[int, int]], previous: str | None = None) -> bool:
    """Whether re-masking character `spans` of `text` is worth an engine pass. Not when they
    cover all of its non-blank characters: that is a fresh greedy decode of the same prompt,
    which comes out the same or as broken (bench/decode.py --repair, see BENCHMARKS.md);
    nor when the last remask (of `previous`) changed nothing, as it would again."""
    if previous is not None and text == previous:
        return False
    covered = [False] * len(text)
    for s, e in spans:
        for i in range(max(0, s), min(e, len(text))):
            covered[i] = True
    return any(not c and not ch.isspace() for c, ch in zip(covered, text, strict=True))
