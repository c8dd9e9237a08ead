"""The stop rule holds exactly once, applied in one place: the engine (`engine.decoding.stops`,
which every engine text passes: the native engine in process or in the daemon, the SGLang
client for its servers, the scripted engine as they do). The language server's
post-processing applies no stop rule of its own: where it used to cut a second time, with
rules of its own, it cut a continuation line the engine rightly kept.

Through the real server over stdio: the scripted engine (tests/fakes/scripted_engine.py, which
cuts with the engine's own rule), and the embedded model."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, cast

import pytest
from lsprotocol import types as t

from engine.api import Plan
from engine.decoding.stops import stop_index
from tests.fakes import scripted_engine
from tests.llada_lsp.lsp_helpers import (
    Recorder,
    completion_id,
    final_refine,
    inline,
    item_texts,
    open_doc,
    server_config,
    server_session,
    start_session,
)

SCRIPT = [
    # statements in an indented body end where the body does (a dedent)...
    {"after": "    y = x\n    ", "done": "z = y + 1\n    w = z\nprint(w)"},
    # ...but not at a continuation line inside the brackets the completion opened
    {"after": "    v = x\n    ", "done": "v = max(\nv, 1)\n    v += 1\nprint(v)"},
    # braces: statements end at a blank line; the scope's closer ends them in post-processing
    {"after": "  let y = x;\n  ", "done": "y += 1;\n}\nfoo();"},
]

CASES = [  # (document with the cursor at |, language, the text shown)
    ("def f(x):\n    y = x\n    |\n    return y\n", "python", "z = y + 1\n    w = z"),
    ("def g(x):\n    v = x\n    |\n    return v\n", "python", "v = max(\nv, 1)\n    v += 1"),
    ("function f(x) {\n  let y = x;\n  |\n  return y;\n}\n", "javascript", "y += 1;"),
]


def test_plans_send_the_stop_rule_the_engine_applies() -> None:
    """Statements in an indented Python body stop at a blank line or a dedent; in a brace
    language at a blank line only (the scope's closer is post-processing's): the plan says so,
    and the engine applies it."""
    from llada_lsp.completion.plans import make_plan
    from llada_lsp.options import parse_options

    options = parse_options({})[0]
    for marked, language, indent in [(CASES[0][0], "python", "    "), (CASES[2][0], "javascript", "")]:
        text, _ = _at(marked)
        plan = make_plan(text, marked.index("|"), language, options)
        assert plan.kind == "statements" and plan.engine_plan is not None
        ep = plan.engine_plan
        assert (ep.stop, ep.indent, ep.max_lines) == ("blank_line", indent, 8)


@pytest.fixture
async def scripted() -> Any:
    command = [sys.executable, scripted_engine.__file__]
    client = cast(Recorder, await server_config(command, LLADA_SCRIPT=json.dumps(SCRIPT)).start())
    await start_session(client, {"speculative": False, "rescueAlternatives": 0})
    yield client
    await client.shutdown_session()
    await client.stop()


def _at(marked: str) -> tuple[str, t.Position]:
    off = marked.index("|")
    text = marked.replace("|", "", 1)
    return text, t.Position(text.count("\n", 0, off), off - (text.rfind("\n", 0, off) + 1))


@pytest.mark.asyncio
@pytest.mark.parametrize(("marked", "language", "shown"), CASES)
async def test_the_scripted_engines_cut_is_the_one_shown(scripted: Any, marked: str, language: str,
                                                         shown: str) -> None:
    text, pos = _at(marked)
    ext = {"python": "py", "javascript": "js"}[language]
    uri = open_doc(scripted, Path(f"/tmp/stop{CASES.index((marked, language, shown))}.{ext}"), language, text=text)
    assert item_texts(await inline(scripted, uri, pos)) == [shown]


@pytest.mark.asyncio(loop_scope="function")
async def test_the_embedded_models_texts_keep_the_plans_stop_rule(tmp_path: Path) -> None:
    """Statements at blank lines of indented bodies: every shown text and every refinement
    already keeps the plan's rule (a blank line, a dedent, 8 lines), as the engine cut it."""
    init = {"speculative": False, "maxTokens": {"line": 8, "statements": 16, "block": 16}}
    bodies = [("def area(w, h):\n    s = w * h\n    |\n    return s\n", "    "),
              ("def total(xs):\n    n = 0\n    |\n    return n\n", "    "),
              ("class Point:\n    def __init__(self, x, y):\n        self.x = x\n        |\n        self.y = y\n",
               "        ")]
    texts: list[tuple[str, str]] = []
    async with server_session(init) as client:
        for k, (marked, indent) in enumerate(bodies):
            text, pos = _at(marked)
            uri = open_doc(client, tmp_path / f"body{k}.py", "python", text=text)
            res = await inline(client, uri, pos, invoked=True)
            texts += [(s, indent) for s in item_texts(res)]
            cid = completion_id(res)
            if cid is not None:
                texts.append(((await final_refine(client, cid))["text"], indent))
    assert any(s for s, _ in texts), "the model answered nothing at any statements spot"
    for s, indent in texts:  # what make_plan asks for there (test_plans_send_the_stop_rule_the_engine_applies)
        assert stop_index(s, Plan(stop="blank_line", indent=indent, max_lines=8)) is None, s
