"""Infill plans: what to ask the engine for at a cursor.

Kinds (docs/lsp.md, "Behaviour", Plans):
  none        - the cursor is inside an identifier, or inside a string with text after it;
  line        - text right of the cursor, inside a line comment, or finishing a started line;
  statements  - a blank line inside a non-empty body;
  block       - after a block opener, in an empty body.

Token healing (a cursor inside a word or after indentation) is the engine's: it backs off
the prompt's partial last token itself and returns only the text after the cursor.

Each kind maps onto an engine `Plan` (token budget, stop rule, indentation: the engine applies
the stop rule, `engine.decoding.stops`) and the post-processing rules
(llada_lsp.completion.postprocess) applied to what the engine returns.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import Any, Literal

from engine.api import Plan, StopKind, decided
from llada_lsp.completion.context import Context, indentation, trim_context
from llada_lsp.options import Options
from llada_lsp.text.positions import LineIndex
from llada_lsp.text.syntax import BRACE_LANGUAGES, in_kind, node_at

Kind = Literal["none", "line", "statements", "block"]

CLOSERS = ")]}>\"'`;,:"
_WORD = re.compile(r"\w")
_LUA_OPENER = re.compile(r"(\bthen|\bdo|\bfunction\b.*\)|\brepeat|\belse)\s*$")


@dataclass(frozen=True)
class InfillPlan:
    kind: Kind
    reason: str
    engine_plan: Plan | None = None  # what the engine is asked for (None for kind "none")
    context: Context | None = None
    brace: bool = False  # the language delimits blocks with braces
    # how many candidates the engine decodes for `engine_plan` (engine.api.decided: decided once
    # here with the preset and sent explicit in `engine_plan`, so neither side derives them again)
    candidates: int = 1

    @property
    def prefix(self) -> str:
        assert self.context is not None
        return self.context.prefix

    @property
    def suffix(self) -> str:
        assert self.context is not None
        return self.context.suffix


def indent_unit(text: str) -> str:
    """The file's indentation step (tab, or the most common space delta; 4 by default)."""
    deltas: Counter[int] = Counter()
    prev = 0
    tabs = 0
    for line in text[:20000].splitlines():
        if not line.strip():
            continue
        ind = indentation(line)
        if ind.startswith("\t"):
            tabs += 1
            continue
        if len(ind) > prev:
            deltas[len(ind) - prev] += 1
        prev = len(ind)
    if tabs and tabs >= sum(deltas.values()):
        return "\t"
    if not deltas:
        return "    "
    return " " * max(1, min(8, deltas.most_common(1)[0][0]))


def opens_block(line: str, language_id: str) -> bool:
    s = line.rstrip()
    if re.search(r"(#|//|--).*$", s) and not s.endswith(("{", ":")):
        s = re.sub(r"\s*(#|//).*$", "", s)
    if language_id == "lua":
        return bool(_LUA_OPENER.search(s))
    if language_id in BRACE_LANGUAGES:
        return s.endswith("{")
    return s.endswith(":") or s.endswith("{")


def _neighbour(index: LineIndex, row: int, step: int) -> tuple[int, str] | None:
    r = row + step
    while 0 <= r < index.line_count:
        lt = index.line_text(r)
        if lt.strip():
            return r, lt
        r += step
    return None


_COMMENT = re.compile(r"\s*(#|//|--)")


def _header(index: LineIndex, prev: tuple[int, str], language_id: str) -> tuple[int, str]:
    """The line that heads `prev`'s body when `prev` ends a docstring or comment that opens
    that body (a docstring or comments right under `def f():`); else `prev` itself."""
    row, line = prev
    ind = len(indentation(line))
    start = row
    s = line.strip()
    if language_id == "python" and s.endswith(('"""', "'''")):
        q = s[-3:]
        if not (s.startswith(q) and len(s) >= 6):
            start = next((r for r in range(row - 1, max(-1, row - 80), -1)
                          if q in index.line_text(r)), -1)
            if start < 0 or not index.line_text(start).strip().startswith(q):
                return prev
    elif not _COMMENT.match(line):
        return prev
    while start > 0 and _COMMENT.match(index.line_text(start - 1)) and \
            len(indentation(index.line_text(start - 1))) == ind:
        start -= 1
    head = _neighbour(index, start, -1)
    if head is not None and opens_block(head[1], language_id) and \
            len(indentation(head[1])) < ind:
        return head
    return prev


def choose_kind(text: str, offset: int, language_id: str, tree: Any = None,
                index: LineIndex | None = None) -> tuple[Kind, str, str]:
    """(kind, reason, body indent) at `offset`."""
    index = index or LineIndex.of(text)
    row, _ = index.position(offset, "utf-32")
    ls, le = index.line_bounds(row)
    left, right = text[ls:offset], text[offset:le]
    brace = language_id in BRACE_LANGUAGES
    if left and right and _WORD.match(left[-1]) and _WORD.match(right[0]):
        return "none", "inside an identifier", ""
    node = node_at(tree, text, offset, left=True) if tree is not None else None
    if node is not None:
        if in_kind(node, "comment"):
            return "line", "inside a comment", indentation(left)
        s = in_kind(node, "string", "template")
        while s is not None and s.parent is not None and any(
                k in s.parent.type for k in ("string", "template")):
            s = s.parent
        b = len(text[:offset].encode("utf-8", "surrogatepass"))
        if s is not None and s.start_byte < b < s.end_byte and right.strip(CLOSERS + " \t"):
            return "none", "inside a string", ""
    closers_only = not right.strip(CLOSERS + " \t")
    if right.strip() and not (closers_only and left.strip() and opens_block(left, language_id)):
        return "line", "text right of the cursor", indentation(left)
    unit = indent_unit(text)
    if left.strip():
        if opens_block(left, language_id):
            nxt = _neighbour(index, row, 1)
            base = indentation(left)
            empty = right.strip() != "" or nxt is None or len(indentation(nxt[1])) <= len(base)
            if empty:
                return "block", "after a block opener", base + unit
            return "statements", "after a block opener, body not empty", base + unit
        return "line", "finishing the line", indentation(left)
    prev = _neighbour(index, row, -1)
    nxt = _neighbour(index, row, 1)
    if prev is not None and not opens_block(prev[1], language_id):
        prev = _header(index, prev, language_id)  # look past a docstring that opens the body
    if prev is not None and opens_block(prev[1], language_id):
        base = indentation(prev[1])
        body_empty = nxt is None or len(indentation(nxt[1])) <= len(base) or (
            brace and nxt[1].strip().startswith("}"))
        indent = left if len(left) > len(base) else base + unit
        if body_empty:
            return "block", "in an empty body", indent
        return "statements", "first line of a body", indent
    return "statements", "blank line", left


def make_plan(text: str, offset: int, language_id: str, options: Options, *, tree: Any = None,
              index: LineIndex | None = None) -> InfillPlan:
    index = index or LineIndex.of(text)
    kind, reason, indent = choose_kind(text, offset, language_id, tree, index)
    brace = language_id in BRACE_LANGUAGES
    if kind == "none":
        return InfillPlan("none", reason, brace=brace)
    co = options.context
    ctx = trim_context(text, offset, index=index, tree=tree, prefix_chars=co.prefix_chars,
                       suffix_chars=co.suffix_chars, kept_chars=co.imports_chars)
    max_lines = options.max_lines
    stop: StopKind
    if kind == "line":
        stop, budget, max_lines = "line", options.max_tokens.line, 1
    elif kind == "statements":
        stop, budget = "blank_line", options.max_tokens.statements
        max_lines = max_lines or 8
        if brace:
            indent = ""  # braces end a body there: statements end at a blank line only (a closer: postprocess)
    else:
        stop, budget = ("brace" if brace else "dedent"), options.max_tokens.block
    keep_closer = False
    if kind == "block" and brace:
        nxt = ctx.suffix.lstrip()
        keep_closer = not nxt.startswith("}")
    plan = decided(Plan(max_tokens=budget, stop=stop, indent=indent, max_lines=max_lines, keep_closer=keep_closer,
                        preset=options.mode, alternatives=options.alternatives or None), options.mode)
    return InfillPlan(kind, reason, plan, ctx, brace, plan.alternatives or 1)  # the one place the server asks


def only_header(left: str, text: str, language_id: str) -> bool:
    """`text`, a line finishing `left` (the cursor's line before the cursor), ends in a block
    opener (`def f(x):`, `if ... {`): offered alone it leaves the block empty."""
    return bool(text.strip()) and "\n" not in text and opens_block(left + text, language_id)


def header_plan(text: str, offset: int, header: str, language_id: str, options: Options) -> InfillPlan | None:
    """The plan for the body of `header` (a line answer that opens a block, `only_header`),
    at the end of it in `text` with `header` inserted at `offset`: a block (or statements)
    span, as after a block opener typed by the user; None when the span is not a body."""
    full = text[:offset] + header + text[offset:]
    plan = make_plan(full, offset + len(header), language_id, options)
    return plan if plan.kind in ("block", "statements") and plan.engine_plan is not None else None
