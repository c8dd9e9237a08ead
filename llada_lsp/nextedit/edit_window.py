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

from engine.api import CompletionRequest, ContextChunk, Plan
from llada_lsp.nextedit.edit_analysis import Site
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


def _point(text: str, i: int) -> tuple[int, int]:
    line_start = text.rfind("\n", 0, i) + 1
    return text.count("\n", 0, i), len(text[line_start:i].encode("utf-8", "surrogatepass"))


def adds_parse_error(language: str, text: str, s: Suggested, errors_now: int, tree: Any = None) -> bool:
    """Whether the document with `s` applied parses with more errors than `errors_now`;
    `tree`, the current tree of `text`, is copied and edited so that the parse is incremental."""
    parser = parser_for(language)
    if parser is None:
        return False
    after = text[:s.start] + s.text + text[s.end:]
    data = after.encode("utf-8", "surrogatepass")
    old_tree = None
    if tree is not None:
        old_tree = tree.copy()
        sb = len(text[:s.start].encode("utf-8", "surrogatepass"))
        eb = sb + len(text[s.start:s.end].encode("utf-8", "surrogatepass"))
        nb = sb + len(s.text.encode("utf-8", "surrogatepass"))
        old_tree.edit(start_byte=sb, old_end_byte=eb, new_end_byte=nb, start_point=_point(text, s.start),
                      old_end_point=_point(text, s.end), new_end_point=_point(after, s.start + len(s.text)))
    new_tree = parser.parse(data, old_tree) if old_tree is not None else parser.parse(data)
    return count_errors(new_tree.root_node) > errors_now


def keep(language: str, text: str, index: LineIndex, found: list[Suggested], kept: tuple[int, int],
         errors_now: int, tree: Any = None, fallback: Mapping[tuple[int, int], Suggested] | None = None
         ) -> list[Suggested]:
    """The suggestions that change something, stay off the kept lines and add no parse error;
    one that adds a parse error is replaced by `fallback`'s at its span (a model fill by its
    site's placeholder) when that one passes the same checks."""
    out = []
    for s in sorted(found, key=lambda s: (s.start, s.end)):
        if s.text == text[s.start:s.end] or touches(index, s, kept):
            continue
        if adds_parse_error(language, text, s, errors_now, tree):
            alt = (fallback or {}).get((s.start, s.end))
            if alt is None or alt == s or alt.text == text[s.start:s.end] \
                    or adds_parse_error(language, text, alt, errors_now, tree):
                continue
            s = alt
        out.append(s)
    return out


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
