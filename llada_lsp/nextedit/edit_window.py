"""Pure helpers of `llada/nextEdit`: the follow-up sites of an edit (`llada_lsp.nextedit.edit_analysis`)
turned into suggestions.

A site with content decided by the analysis (a rename's new name, an argument deleted or
reordered) becomes a suggestion at once, confidence 1.0, source "analysis". A site the model
fills (an added parameter's argument at a call) becomes a masked infill: a completion request
whose prefix ends at the site (plus its separator) and whose suffix starts after it, with the
edited definition given as context, a one-line stop rule and a small per-site token budget
(the end-of-middle token makes the length variable). Its fill is cut to one argument and its
confidence is the weakest committed token's (`min_confidence` of the done event's stats).
When no fill is run or none passes, the site gets a placeholder (`from_placeholder`): the
parameter's or field's name, marked for the user to type over, confidence 0.

Then every suggestion is checked: none may touch the kept lines (the line being typed and the
edited range), none may equal the text it replaces, and none may add a parse error
(tree-sitter: the document with it applied has no more error nodes than without). A model fill
that adds one gives way to its site's placeholder (checked the same way), as a fill below the
confidence threshold does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import tree_sitter as ts

from engine.api import CompletionRequest, ContextChunk, Plan
from llada_lsp.nextedit.edit_analysis import Site
from llada_lsp.nextedit.edit_limits import Guard, parse
from llada_lsp.text.positions import Encoding, LineIndex, units
from llada_lsp.text.syntax import count_errors, parser_for


@dataclass(frozen=True)
class Suggested:
    """One suggestion in document offsets: replace text[start:end] by `text`."""

    start: int
    end: int
    text: str
    confidence: float
    source: str = "analysis"  # "analysis" (the edit decides it), "model" (a masked fill) or "placeholder"
    placeholder: tuple[int, int] | None = None  # character offsets in `text` of the name to type over


def from_analysis(site: Site) -> Suggested | None:
    if site.prior is None:
        return None
    return Suggested(site.start, site.end, site.before + site.prior + site.after, 1.0)


def from_placeholder(site: Site) -> Suggested | None:
    """A site the model would fill, filled with its name (`Site.hint`) marked as a placeholder
    for the user to type over: confidence 0, source "placeholder"."""
    if site.prior is not None or not site.hint:
        return None
    a = len(site.before)
    return Suggested(site.start, site.end, site.before + site.hint + site.after, 0.0, "placeholder",
                     (a, a + len(site.hint)))


def fill_request(rid: str, doc_key: str, path: str, text: str, site: Site, definition: str,
                 prefix_chars: int, suffix_chars: int, budget: int, preset: str | None) -> CompletionRequest:
    """The masked infill of a model-filled site: the edited definition as context when the
    prefix does not already hold it."""
    a = max(0, site.start - prefix_chars)
    if a > 0:
        nl = text.find("\n", a, site.start)
        a = nl + 1 if nl >= 0 else a
    prefix = text[a:site.start] + site.before
    suffix = site.after + text[site.end:site.end + suffix_chars]
    context = (ContextChunk(path, definition),) if definition and definition not in prefix else ()
    plan = Plan(max_tokens=budget, stop="line", preset=preset, alternatives=1)
    return CompletionRequest(rid, doc_key, prefix, suffix, plan, context)


FILL_PREFIX_CHARS = 300  # a masked fill's prompt around its site (the signature comes as context)
FILL_SUFFIX_CHARS = 100
FILL_ROWS = 4  # masked fills submitted at once (the in-process step loop's rows)

_CLOSE = {")": "(", "]": "[", "}": "{"}


def one_argument(fill: str) -> str:
    """The fill up to the end of its first argument: a top-level comma, an unmatched closer or
    a line break ends it."""
    depth, quote = 0, ""
    for k, ch in enumerate(fill):
        if quote:
            if ch == quote:
                quote = ""
        elif ch in "\"'":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in _CLOSE:
            if depth == 0:
                return fill[:k].strip()
            depth -= 1
        elif (ch == "," and depth == 0) or ch == "\n":
            return fill[:k].strip()
    return fill.strip()


def from_fill(site: Site, fill: str, confidence: float) -> Suggested | None:
    arg = one_argument(fill)
    if not arg:
        return None
    return Suggested(site.start, site.end, site.before + arg + site.after, confidence, "model")


def site_suggestions(sites: Sequence[Site], fills: Sequence[Suggested | None], placeholders: bool = True
                     ) -> tuple[list[Suggested], dict[tuple[int, int], Suggested]]:
    """The analysis' suggestions, then for each masked site (`prior` None, in order, one entry of
    `fills` each) its fill or, when it has none and `placeholders` is on, its placeholder; and
    those placeholders by span: what `keep` falls back to when a fill adds a parse error."""
    found = [s for site in sites if (s := from_analysis(site)) is not None]
    holders: dict[tuple[int, int], Suggested] = {}
    for site, filled in zip([x for x in sites if x.prior is None], fills, strict=True):
        p = from_placeholder(site) if placeholders else None
        if p is not None:
            holders[(p.start, p.end)] = p
        s = filled if filled is not None else p
        if s is not None:
            found.append(s)
    return found, holders


def touches(index: LineIndex, s: Suggested, kept: tuple[int, int]) -> bool:
    """Whether the suggestion's range meets a kept line."""
    a, b = index.line_of(s.start), index.line_of(s.end)
    return a <= kept[1] and b >= kept[0]


MAX_ROUNDS = 4  # parses of the document with the suggestions applied, per layer of them
MAX_LAYERS = 4  # layers of nested (overlapping) suggestions checked; deeper ones are dropped


def _layers(found: list[Suggested]) -> list[list[Suggested]]:
    """`found` (sorted) split into layers of suggestions that do not overlap, each one in the
    first layer it fits (a reordered call inside another one's arguments goes to the next)."""
    layers: list[list[Suggested]] = []
    for s in found:
        for layer in layers:
            last = layer[-1]
            if s.start > last.end or (s.start == last.end and (last.start < last.end or s.start < s.end)):
                layer.append(s)
                break
        else:
            layers.append([s])
    return layers[:MAX_LAYERS]


def _applied(text: str, found: list[Suggested]) -> tuple[str, list[tuple[int, int]]]:
    """`text` with every suggestion of one layer applied, and each one's span in the result."""
    parts: list[str] = []
    spans: list[tuple[int, int]] = []
    at = shift = 0
    for s in found:
        parts += [text[at:s.start], s.text]
        spans.append((s.start + shift, s.start + shift + len(s.text)))
        shift += len(s.text) - (s.end - s.start)
        at = s.end
    parts.append(text[at:])
    return "".join(parts), spans


def _error_rows(node: ts.Node, limit: int = 64) -> list[int]:
    """The first rows of the ERROR and MISSING nodes under `node` (none inside an ERROR)."""
    out: list[int] = []
    stack = [node] if node.has_error or node.is_missing else []
    while stack and len(out) < limit:
        cur = stack.pop()
        if cur.is_error or cur.is_missing:
            out.append(cur.start_point[0])
            continue
        stack.extend(c for c in cur.children if c.has_error or c.is_missing)
    return out


def _edited(tree: ts.Tree | None, text: str, index: LineIndex, layer: list[Suggested]) -> ts.Tree | None:
    """A copy of `tree` (the tree of `text`) edited as applying `layer` changes the text, last
    suggestion first (the offsets before each one stay those of `text`): the parse of the
    result is then incremental. None (a whole parse) without a tree or for a non-ASCII text
    (its byte offsets would cost a pass over the text per suggestion)."""
    if tree is None or not text.isascii():
        return None
    out = tree.copy()
    for s in reversed(layer):
        r1, r2 = index.line_of(s.start), index.line_of(s.end)
        c1, c2 = s.start - index.start(r1), s.end - index.start(r2)
        new = s.text.encode("utf-8", "surrogatepass")
        rows = s.text.count("\n")
        end = (r1 + rows, len(new) - new.rfind(b"\n") - 1) if rows else (r1, c1 + len(new))
        out.edit(start_byte=s.start, old_end_byte=s.end, new_end_byte=s.start + len(new), start_point=(r1, c1),
                 old_end_point=(r2, c2), new_end_point=end)
    return out


def _blamed(language: str, text: str, index: LineIndex, layer: list[Suggested], errors_now: int,
            old_rows: set[int], guard: Guard | None, tree: ts.Tree | None = None) -> set[int] | None:
    """One parse of `text` with `layer` applied (incremental from `tree`, the tree of `text`,
    when given): None when it adds no parse error, else the
    suggestions blamed: those on the first row of an error, else the nearest one before it
    (an error the text had, moved by the suggestions above it, blames none on other rows);
    all of them when no error can be placed."""
    parser = parser_for(language)
    if parser is None:
        return None
    after, spans = _applied(text, layer)
    root = parse(parser, after.encode("utf-8", "surrogatepass"), _edited(tree, text, index, layer), guard).root_node
    if count_errors(root) <= errors_now:
        return None
    new_index = LineIndex.of(after)
    rows = [(new_index.line_of(a), new_index.line_of(b)) for a, b in spans]
    ends = [index.line_of(s.end) for s in layer]
    grown = [s.text.count("\n") - text.count("\n", s.start, s.end) for s in layer]
    moved = {r + sum(g for e, g in zip(ends, grown, strict=True) if e < r) for r in old_rows}
    blamed: set[int] = set()
    for row in _error_rows(root):
        on_row = [k for k, (a, b) in enumerate(rows) if a <= row <= b]
        if not on_row and row in moved:
            continue
        blamed.update(on_row or [k for k, (a, _b) in enumerate(rows) if a <= row][-1:])
    return blamed or set(range(len(layer)))


def adds_parse_error(language: str, text: str, s: Suggested, errors_now: int, tree: Any = None) -> bool:
    """Whether the document with `s` alone applied parses with more errors than `errors_now`."""
    return _blamed(language, text, LineIndex.of(text), [s], errors_now, set(), None) is not None


def keep(language: str, text: str, index: LineIndex, found: list[Suggested], kept: tuple[int, int],
         errors_now: int, tree: Any = None, fallback: Mapping[tuple[int, int], Suggested] | None = None,
         guard: Guard | None = None) -> list[Suggested]:
    """The suggestions that change something, stay off the kept lines and add no parse error;
    one that adds a parse error is replaced by `fallback`'s at its span (a model fill by its
    site's placeholder) when that one passes the same checks.

    The parse check applies all the suggestions at once (a layer of non-overlapping ones) and
    parses once; when that adds errors, the suggestions on their rows give way (to the
    fallback, else out) and it parses again, `MAX_ROUNDS` times at most (then none of the
    layer is kept): a few parses per request, whatever the number of sites. `tree`, the
    current tree of `text`, gives the rows of the errors the text has already."""
    fallback = fallback or {}
    cands = [s for s in sorted(found, key=lambda s: (s.start, s.end))
             if s.text != text[s.start:s.end] and not touches(index, s, kept)]
    old_rows = set(_error_rows(tree.root_node)) if tree is not None and errors_now else set()
    out: list[Suggested] = []
    for layer in _layers(cands):
        for _ in range(MAX_ROUNDS):
            blamed = _blamed(language, text, index, layer, errors_now, old_rows, guard, tree) if layer else None
            if blamed is None:
                out += layer
                break
            swapped = []
            for k, s in enumerate(layer):
                alt = fallback.get((s.start, s.end)) if k in blamed else s
                if alt is None or (k in blamed and (alt == s or alt.text == text[s.start:s.end])):
                    continue
                swapped.append(alt)
            layer = swapped
    return sorted(out, key=lambda s: (s.start, s.end))


def lsp_suggestion(text: str, index: LineIndex, s: Suggested, enc: Encoding) -> dict[str, Any]:
    """The wire form: {range, newText, oldText, confidence, line, source, placeholder?}; a
    placeholder's offsets count `enc`'s code units of `newText`, as `range` characters do."""
    (l1, c1), (l2, c2) = index.position(s.start, enc), index.position(s.end, enc)
    out: dict[str, Any] = {
        "range": {"start": {"line": l1, "character": c1}, "end": {"line": l2, "character": c2}},
        "newText": s.text, "oldText": text[s.start:s.end], "confidence": round(s.confidence, 6),
        "line": l1, "source": s.source}
    if s.placeholder is not None:
        a, b = s.placeholder
        ua = units(s.text[:a], enc)
        out["placeholder"] = {"start": ua, "end": ua + units(s.text[a:b], enc)}
    return out
