"""The parse-error guard (issue 51): no suggestion is shown if accepting it adds a parse error.

The guard itself on the issue's examples, then the real server over stdio with a scripted
engine (tests/fakes/scripted_engine.py) that answers with deliberately bad candidates: every
item the editor gets, applied as the editor applies it (its range, its insert text), leaves
a file that Python's own parser accepts (`ast.parse`, not tree-sitter: an independent check).
"""

from __future__ import annotations

import ast
import asyncio
import json
import sys
from pathlib import Path
from typing import Any, cast

import pytest
from lsprotocol import types as t

from llada_lsp.completion.guard import Guard, cuts
from llada_lsp.completion.line_rest import rest_of_line
from llada_lsp.text.syntax import parser_for
from tests.fakes import scripted_engine
from tests.llada_lsp.lsp_helpers import (
    Recorder,
    completion_id,
    inline,
    item_texts,
    open_doc,
    server_config,
    start_session,
)


def guard_at(marked: str, language_id: str = "python") -> Guard:
    """The guard at `|` in `marked` (the mark removed), over the rest of its line."""
    off = marked.index("|")
    text = marked.replace("|", "", 1)
    parser = parser_for(language_id)
    assert parser is not None
    return Guard(language_id, text, off, rest_of_line(text, off), parser.parse(text.encode()))


CLASS = "class A:\n    |\n\n    def other(self):\n        pass\n"


@pytest.mark.parametrize(("marked", "bad", "good"), [
    (CLASS, "def _get_type(self, value):", "def _get_type(self, value):\n        return type(value)"),
    ("def f(v):\n    return |\n", "raise", "v + 1"),
    ("print(|)\n", "(r'\\n', '))", "'a'"),  # after an auto-closed `(`: the rest `)` is kept
    ("n = 1\nassert |\n", "(n) == ')", "n == 1"),
    ("fn main() {\n    |\n}\n", "if x > 0 {", "if x > 0 { y(); }"),
    ("if x:\n    |\nelse:\n    pass\n", "for i in r:", "for i in r:\n        pass"),
])
def test_the_guard_on_the_issues_examples(marked: str, bad: str, good: str) -> None:
    lang = "rust" if marked.startswith("fn") else "python"
    g = guard_at(marked, lang)
    assert g.breaks(bad) and not g.breaks(good)
    assert g.cut(good) == good


def test_a_closer_before_a_balanced_rest_is_judged_where_it_lands() -> None:
    """`max(` typed before `area(5, 6)`: the model's `)` is placed after the rest (line_rest.fit),
    and the guard judges that text, not `max()area(5, 6)`."""
    g = guard_at("other = max(|area(5, 6)\n")
    assert not g.breaks(")") and g.breaks("x y")


def test_errors_elsewhere_do_not_withhold_suggestions() -> None:
    """A file being typed has errors: a suggestion is judged on what it adds, where it goes."""
    g = guard_at("def g():\n    x = = 1\n\ndef f(v):\n    return |\n")
    assert not g.breaks("v + 1") and g.breaks("raise")
    # an unclosed bracket above swallows the rest of the file: the cursor's unit is judged alone
    g = guard_at("x = foo(\ndef f():\n    |\n")
    assert not g.breaks("return 1") and g.breaks("return raise")
    # the line being typed is broken already: a suggestion that leaves it broken is withheld
    g = guard_at("x = foo(a, |\n")
    assert g.breaks("b") and not g.breaks("b)")


def test_a_fix_here_does_not_pay_for_a_break_there() -> None:
    g = guard_at("def f(v):\n    return (|\n")
    assert g.breaks("v)\n    x = = 2") and not g.breaks("v)")


def test_the_longest_cut_that_parses() -> None:
    g = guard_at("def f(v):\n    |\n")
    assert g.cut("y = v\n    return (y +") == "y = v"
    assert g.cut("x = = 1") == ""
    assert guard_at("def f(v):\n    return |\n").cut("g(v) + = 1") == "g(v)"
    assert cuts("a = f(x)\nb = g(") == ["a = f(x)"]
    assert Guard("python", "x", 0).breaks("(((") is False  # no tree: inactive


def parses(text: str) -> bool:
    try:
        ast.parse(text)
    except SyntaxError:
        return False
    return True


def apply(text: str, item: t.InlineCompletionItem) -> str:
    """`text` with `item` accepted as an editor does (ASCII: UTF-16 positions are characters)."""
    lines = text.split("\n")

    def at(p: t.Position) -> int:
        return sum(len(ln) + 1 for ln in lines[: p.line]) + p.character

    assert item.range is not None and isinstance(item.insert_text, str)
    return text[: at(item.range.start)] + item.insert_text + text[at(item.range.end):]


# the deliberately bad candidates: the model's texts the issue saw, each followed by one that fits
SCRIPT = [
    {"after": "    def _get_type(self, value", "done": "):"},
    {"after": "    def _get_type(self, value):", "done": "\n        return type(value)"},
    {"after": "    return ", "done": "raise", "alternatives": ["x = = 1", "value + 1"]},
    {"after": "print(", "done": "(r'\\n', '))", "alternatives": ["'a'"]},
    {"after": "assert ", "done": "(n) == ')", "alternatives": ["n == 1"]},
    {"after": "other = max(", "done": ")"},  # `max(` typed before `area(5, 6)` (issue 51 item 2)
    {"after": "    total = ", "drafts": ["value * 2", "value * (2"], "done": "value * (2 +"},
]


@pytest.fixture
async def scripted() -> Any:
    command = [sys.executable, scripted_engine.__file__]
    client = cast(Recorder, await server_config(command, LLADA_SCRIPT=json.dumps(SCRIPT)).start())
    await start_session(client, {"speculative": False, "mode": "speedy"})
    yield client
    await client.shutdown_session()
    await client.stop()


async def ask(client: Any, marked: str, name: str) -> tuple[str, t.InlineCompletionList | None]:
    """An inline completion at `|` in `marked`, opened as a document of its own."""
    off = marked.index("|")
    text = marked.replace("|", "", 1)
    uri = open_doc(client, Path(f"/tmp/{name}.py"), "python", text=text)
    pos = t.Position(text.count("\n", 0, off), off - (text.rfind("\n", 0, off) + 1))
    return text, await inline(client, uri, pos)


CASES = [  # (the document, the cursor at |; the text shown)
    ("class A:\n    def _get_type(self, value|\n\n    def other(self):\n        pass\n",
     "):\n        return type(value)"),  # a header alone is not shown: with its body, as a block
    ("class A:\n    def twice(self, value):\n        return |\n", "value + 1"),  # not raise, not `x = = 1`
    ("print(|)\n", "'a')"),  # the auto-closed `)` kept after it
    ("n = 1\nassert |\n", "n == 1"),
    ("other = max(|area(5, 6)\n", "area(5, 6))"),  # the closer goes after the rest, not before it
]


@pytest.mark.asyncio
@pytest.mark.parametrize(("marked", "shown"), CASES)
async def test_no_shown_suggestion_adds_a_parse_error(scripted: Any, marked: str, shown: str) -> None:
    text, res = await ask(scripted, marked, f"guard{CASES.index((marked, shown))}")
    assert item_texts(res)[:1] == [shown]
    for item in res.items if res else []:
        assert parses(apply(text, item)), item.insert_text


@pytest.mark.asyncio
async def test_a_refinement_that_would_break_the_code_is_not_sent(scripted: Any) -> None:
    _text, res = await ask(scripted, "def f(value):\n    total = |\n    return total\n", "guard_refine")
    assert item_texts(res) == ["value * 2"]
    cid = completion_id(res)
    assert cid is not None
    final = await scripted.final_refine(cid, 30)
    sent = [r["text"] for r in scripted.refines if r["completionId"] == cid]
    assert final["text"] == "value * 2" and set(sent) == {"value * 2"}, sent


def test_cached_and_typed_through_answers_pass_the_guard() -> None:
    """Answers that skip the engine are checked too: a cached candidate that would break the
    code is passed over for one that fits, and a type-through rest that would break it is not
    served (the request goes to the engine)."""
    from llada_lsp.completion.cache import key_of, remember
    from llada_lsp.completion.completions import CompletionService
    from llada_lsp.completion.plans import make_plan
    from llada_lsp.options import parse_options
    from llada_lsp.text.documents import DocumentStore

    async def scenario() -> tuple[Any, Any, list[str]]:
        engine = scripted_engine.ScriptedEngine([{"after": "return ", "done": "value + 1"}])
        await engine.start(lambda *a, **k: None)
        text = "def f(value):\n    return \n"
        store = DocumentStore()
        store.open("file:///c.py", "python", 1, text)
        options, _ = parse_options({"speculative": False})
        svc = CompletionService(store, engine, options, lambda m, p: None, lambda: "utf-16")
        plan = make_plan(text, 25, "python", options)
        svc.cache.put(key_of(plan.prefix, plan.suffix, plan.kind), "raise", ("value * 2",))
        cached = await svc.complete("file:///c.py", 1, 11)
        # a shown suggestion whose rest, once "v" is typed, would break the line
        svc.shown["file:///c.py"] = remember("9", text, 25, "v = = 1", "line")
        store.change("file:///c.py", 2, [t.TextDocumentContentChangeWholeDocument("def f(value):\n    return v\n")],
                     "utf-16")
        typed = await svc.complete("file:///c.py", 1, 12)
        return cached, typed, [r.prefix for r in engine.requests]

    cached, typed, prefixes = asyncio.run(scenario())
    assert cached is not None and cached.source == "cache" and cached.text == "value * 2"
    assert typed is None or typed.source == "engine"
    # the cache answered without the engine; the typed-through rest was not served: the engine was asked
    assert prefixes and all(p.endswith("return v") for p in prefixes)
