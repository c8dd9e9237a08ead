"""Text-level stop rules of a plan: where a completion's text ends (pure functions).

The one place the stop rule is applied: the engine ends decoding where `stop_index` fires and
cuts every text it sends there (`engine.prompt.builder.PromptBuilder.answer`); the SGLang client,
whose servers know no such rule, cuts their text with `cut_text` (`llada_lsp.engines.sglang_engine`).
The language server's post-processing (`llada_lsp.completion.postprocess`) trusts that cut and
applies no stop rule of its own.
"""

from __future__ import annotations

from engine.api import Plan

OPENERS, CLOSERS = "([{", ")]}"


def _width(indent: str) -> int:
    """The columns of leading whitespace (a tab to the next multiple of 4)."""
    return len(indent.expandtabs(4))


def _indent_of(line: str) -> int:
    return _width(line[: len(line) - len(line.lstrip(" \t"))])


def stop_index(text: str, plan: Plan) -> int | None:
    """Character index where `text` must be cut under `plan`, or None while it may go on.

    Only decisions that later text cannot change are returned, so the caller may apply the
    rule to a growing prefix.
    """
    cuts: list[int] = []
    if plan.stop == "line":
        nl = text.find("\n")
        if nl >= 0:
            cuts.append(nl)
    if plan.max_lines > 0:
        count = 0
        for i, ch in enumerate(text):
            if ch == "\n":
                count += 1
                if count >= plan.max_lines:
                    cuts.append(i)
                    break
    if plan.stop in ("dedent", "brace", "blank_line"):
        cut = _structural_cut(text, plan)
        if cut is not None:
            cuts.append(cut)
    return min(cuts) if cuts else None


def _structural_cut(text: str, plan: Plan) -> int | None:
    base = _width(plan.indent)
    # "blank_line" with an indent: statements also end where their body does (a dedent)
    dedents = plan.stop in ("dedent", "brace") or (plan.stop == "blank_line" and base > 0)
    depth = 0
    pos = 0
    lines = text.split("\n")
    for li, line in enumerate(lines):
        complete = li < len(lines) - 1  # a newline follows: the line is known whole
        start = pos
        pos += len(line) + 1
        if li > 0:
            stripped = line.strip()
            if plan.stop == "blank_line" and not stripped and complete:
                return start - 1
            if stripped and dedents and depth <= 0 and _indent_of(line) < base:
                if plan.stop == "brace" and stripped[0] in CLOSERS and plan.keep_closer:
                    # keep the closing line itself, cut after it
                    end = text.find("\n", start)
                    return end if end >= 0 else None
                return start - 1
        for ch in line:
            if ch in OPENERS:
                depth += 1
            elif ch in CLOSERS:
                depth -= 1
                if depth < 0 and plan.stop == "brace" and li == 0 and not plan.keep_closer:
                    return start + line.index(ch)
    return None


def cut_text(text: str, plan: Plan) -> tuple[str, bool]:
    """The text kept under the plan and whether the rule fired."""
    i = stop_index(text, plan)
    return (text, False) if i is None else (text[:i], True)
