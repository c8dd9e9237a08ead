"""`Capabilities`: built once per engine `info` (`EngineClient.caps`), every field read by a
decision of the server, and the keys only the status carries left in `info`."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping
from typing import Any

import pytest

from engine.api import MAX_ALTERNATIVES
from llada_lsp.engines.capabilities import Capabilities
from tests.fakes.scripted_engine import ScriptedEngine


@pytest.fixture
def builds(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Every `Capabilities.of` call's info, in order."""
    seen: list[dict[str, Any]] = []
    of = Capabilities.of

    def counted(info: Mapping[str, Any]) -> Capabilities:
        seen.append(dict(info))
        return of(info)

    monkeypatch.setattr(Capabilities, "of", staticmethod(counted))
    return seen


def test_caps_are_built_once_per_info(builds: list[dict[str, Any]]) -> None:
    eng = ScriptedEngine([])
    assert [eng.caps for _ in range(5)] == [Capabilities(remask=False)] * 5 and len(builds) == 1
    eng.info = {"backend": "sglang", "edits": False, "alternatives": 1, "next_edit": False, "names": False}
    assert eng.caps == Capabilities(edits=False, remask=True, alternatives=1, next_edit=False, names=False)
    eng.info = {**eng.info, "servers": [], "remask": False}  # keys added: built again, once
    assert eng.caps.remask is False and eng.caps is eng.caps and len(builds) == 3
    assert eng.info["backend"] == "sglang" and eng.info["servers"] == []


def test_completions_read_the_engines_caps_without_rebuilding_them(builds: list[dict[str, Any]]) -> None:
    """Three completions through the pipeline (plan, settle, rescue, refine) build the
    capabilities once: the engine's info did not change."""
    from llada_lsp.completion.completions import CompletionService
    from llada_lsp.options import parse_options
    from llada_lsp.text.documents import DocumentStore

    async def scenario() -> list[Any]:
        engine = ScriptedEngine([{"after": "return ", "done": "value + 1"}])
        await engine.start(lambda *a, **k: None)
        store = DocumentStore()
        store.open("file:///c.py", "python", 1, "def f(value):\n    return \n")
        options, _ = parse_options({"speculative": False})
        svc = CompletionService(store, engine, options, lambda m, p: None, lambda: "utf-16")
        return [await svc.complete("file:///c.py", 1, 11, invoked=k == 2) for k in range(3)]

    answers = asyncio.run(scenario())
    assert all(a is not None and a.text == "value + 1" for a in answers)
    assert len(builds) == 1


def test_every_field_is_a_decision_and_the_status_keys_stay_in_info() -> None:
    """The five fields the server decides on; what only `llada/status` shows is not parsed."""
    assert [f.name for f in dataclasses.fields(Capabilities)] == ["edits", "remask", "alternatives", "next_edit",
                                                                  "names"]
    caps = Capabilities.of({"backend": "sglang", "granularity": "block", "block_routing": True, "indel": True,
                            "alternatives": 0})
    assert caps == Capabilities() and caps.alternatives == MAX_ALTERNATIVES  # a bad count: the native one
