"""The systems `bench/next_edit.py` compares, each task -> an `Answer`: the language server's
pipeline (`server_pipeline`, with the model's masked fills decoded as rows of the engine's step
loop by `rows_fill`, or fills off) and a find-and-replace user (`textual`).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bench.next_edit_tasks import Task
from llada_lsp.nextedit import edit_window as ew
from llada_lsp.nextedit.edit_analysis import analyze
from llada_lsp.nextedit.edit_window import Suggested
from llada_lsp.text.positions import LineIndex
from llada_lsp.text.syntax import count_errors, parser_for


@dataclass
class Answer:
    suggestions: list[Suggested]
    ms: float
    analysis_ms: float = 0.0
    kind: str = ""
    fill_ms: float = 0.0  # the part of `ms` the masked fills took
    placeholders: dict[tuple[int, int], Suggested] = field(default_factory=dict)  # per masked site, kept


def server_pipeline(t: Task, fill: Callable[[list[Any]], list[tuple[str, float]]] | None, site_tokens: int
                    ) -> Answer:
    """What the language server does (llada_lsp.nextedit.next_edit), synchronously: analysis, analysis
    suggestions, masked fills (`fill`: CompletionRequests -> (text, weakest confidence) each,
    decoded together as rows of the step loop; None: fills off, the gated default), the
    placeholder of each masked site no fill reaches (or whose fill adds a parse error), checks
    (`edit_window.site_suggestions` and `keep`, as the server calls them). Every fill is kept
    here whatever its confidence; `gated` applies a threshold (a fill below it gives way to the placeholder)."""
    parser = parser_for(t.lang)
    assert parser is not None
    old_tree, new_tree = parser.parse(t.old.encode()), parser.parse(t.new.encode())
    t0 = time.perf_counter()
    a = analyze(t.lang, t.old, t.new, old_tree, new_tree)
    t1 = time.perf_counter()
    definition = t.new[a.definition[0]:a.definition[1]] if a.definition else ""
    masked = [x for x in a.sites if x.prior is None]
    f0 = time.perf_counter()
    fills = fill([ew.fill_request(f"b{k}", f"bench{k}", t.source, t.new, site, definition, ew.FILL_PREFIX_CHARS,
                                  ew.FILL_SUFFIX_CHARS, site_tokens, None) for k, site in enumerate(masked)]) \
        if fill is not None and masked else [("", 0.0)] * len(masked)
    fill_ms = (time.perf_counter() - f0) * 1000 if fill is not None and masked else 0.0
    found, holders = ew.site_suggestions(a.sites, [ew.from_fill(site, text, conf)
                                                   for site, (text, conf) in zip(masked, fills, strict=True)])
    index, errors = LineIndex.of(t.new), count_errors(new_tree.root_node)
    out = ew.keep(t.lang, t.new, index, found, (t.line, t.line), errors, new_tree, holders)
    ms = (time.perf_counter() - t0) * 1000  # what the server does; the rest is the bench's scoring
    kept_holders = [p for p in out if p.source == "placeholder"] if fill is None else \
        ew.keep(t.lang, t.new, index, list(holders.values()), (t.line, t.line), errors, new_tree)
    return Answer(out, ms, (t1 - t0) * 1000, a.kind, fill_ms, {(p.start, p.end): p for p in kept_holders})


def textual(t: Task) -> Answer:
    """A find-and-replace user: a changed word renamed file-wide; a parameter change applied to
    each `name(` call by splitting its arguments at commas; a value added to a return typed
    into each `a, b = name(` unpacking."""
    t0 = time.perf_counter()
    out: list[Suggested] = []
    if t.kind == "field_added":  # `Name(...)` / `Name{...}` / `Name { ... }` on one line: the name inserted
        label = "" if t.lang == "python" else f"{t.param}: "
        for m in re.finditer(rf"(?<![\w.]){re.escape(t.fname)}(\(|\s?\{{)([^(){{}}\n]*)([)}}])", t.new):
            if t.new.count("\n", 0, m.start()) == t.line:
                continue
            args = [x.strip() for x in m.group(2).split(",") if x.strip()]
            args.insert(min(t.index, len(args)), label + t.param)
            pad = " " if m.group(1).endswith(" {") else ""
            text = m.group(1)[-1] + pad + ", ".join(args) + pad + m.group(3)
            out.append(Suggested(m.start(1) + len(m.group(1)) - 1, m.end(), text, 1.0, "textual"))
    elif t.kind == "return_added":  # `a, b = name(` / `= x.name(` on one line: the value's name inserted
        for m in re.finditer(rf"(?m)^[ \t]*(\w+(?:[ \t]*,[ \t]*\w+)+)[ \t]*=[ \t]*(?:[\w.]+\.)?{re.escape(t.fname)}\(",
                             t.new):
            names = [x.strip() for x in m.group(1).split(",")]
            names.insert(min(t.index, len(names)), t.param)
            out.append(Suggested(m.start(1), m.end(1), ", ".join(names), 1.0, "textual"))
    elif t.kind in ("param_added", "param_removed", "param_reordered"):
        lead = r"(?<![\w.])" if t.lang == "python" else r"(?<!\w)"  # methods: `.name(` and `::name(` too
        for m in re.finditer(rf"{lead}{re.escape(t.fname)}\(([^()\n]*)\)", t.new):
            if t.new.rfind("def ", 0, m.start()) == m.start() - 4 or t.new.count("\n", 0, m.start()) == t.line:
                continue
            args = [x.strip() for x in m.group(1).split(",")] if m.group(1).strip() else []
            if t.kind == "param_added":
                args.insert(min(t.index, len(args)), t.param)
            elif t.kind == "param_removed" and t.index < len(args):
                args.pop(t.index)
            elif t.kind == "param_reordered" and len(args) > t.index:
                j = t.index + 1 if t.index + 1 < len(args) else t.index - 1
                args[t.index], args[j] = args[j], args[t.index]
            out.append(Suggested(m.start(1) - 1, m.end(), "(" + ", ".join(args) + ")", 1.0, "textual"))
    else:
        ow, nw = re.findall(r"\w+", t.old), re.findall(r"\w+", t.new)
        diff = [(a, b) for a, b in zip(ow, nw, strict=False) if a != b] if len(ow) == len(nw) else []
        if len(diff) == 1 and re.fullmatch(r"[A-Za-z_]\w*", diff[0][0]):
            o, n = diff[0]
            for m in re.finditer(rf"\b{re.escape(o)}\b", t.new):
                if t.new.count("\n", 0, m.start()) != t.line:
                    out.append(Suggested(m.start(), m.end(), n, 1.0, "textual"))
    return Answer(out, (time.perf_counter() - t0) * 1000)


def rows_fill(eng: Any) -> Callable[[list[Any]], list[tuple[str, float]]]:
    """Masked fills decoded together: every request submitted to the engine's step loop (one
    row each, up to its batch), stepped until all are done."""
    from engine.decoding.local import LOCAL_OWNER

    def fill(reqs: list[Any]) -> list[tuple[str, float]]:
        return [x for k in range(0, len(reqs), ew.FILL_ROWS) for x in wave(reqs[k:k + ew.FILL_ROWS])]

    def wave(reqs: list[Any]) -> list[tuple[str, float]]:
        loop = eng.loop()
        done: dict[str, Any] = {}

        def emit(ev: Any, _why: Any) -> None:
            if ev.kind in ("done", "error"):
                done[ev.request_id] = ev

        for r in reqs:
            loop.submit(r, LOCAL_OWNER, emit)
        while len(done) < len(reqs):
            if not loop.step() and len(done) < len(reqs) and not loop.running:
                raise SystemExit("a fill ended without a done event")
        out = []
        for r in reqs:
            ev = done[r.request_id]
            if ev.kind != "done" or ev.stats is None:
                raise SystemExit(f"fill failed: {ev.error}")
            out.append((ev.text, float(ev.stats["min_confidence"])))
        return out
    return fill

