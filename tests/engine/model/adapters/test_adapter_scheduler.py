"""Every real family through the daemon's batched scheduler: a request batched with others
gives the events it gives alone, and the text the in-process engine gives; so do its
alternatives (engine.decoding.alternatives)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from engine.api import CompletionRequest, EngineEvent, Plan
from engine.decoding.scheduler import Scheduler
from engine.service import TextEngine
from tests.engine.model.adapters.test_adapter_service import char_tokenizer
from tests.engine.model.adapters.tiny_ckpts import write_dream, write_llada, write_llada2

PROMPTS = [
    ("def f(x):\n    return ", "\n\nprint(f(2))\n", Plan(max_tokens=12)),
    ("x = [", "]\n", Plan(max_tokens=8, preset="quality", alternatives=1)),
    ("import os\nos.", "", Plan(max_tokens=20, preset="one_per_step")),
]


def run(s: Scheduler, log: dict[str, list[tuple[str, str]]], rids: list[str]) -> None:
    for _ in range(1000):
        if all(log.get(r) and log[r][-1][0] in ("done", "error") for r in rids):
            return
        s.step()
    raise AssertionError("requests did not finish")


@pytest.mark.parametrize("write, family", [(write_llada2, "llada2"), (write_llada, "llada"), (write_dream, "dream")])
def test_family_batches_like_it_runs_alone(write: Callable[[Path], Path], family: str, tmp_path: Path) -> None:
    path = write(tmp_path / family)
    char_tokenizer(path)
    eng = TextEngine(path, threads=1, max_len=256, max_prompt_tokens=64)
    log: dict[str, list[tuple[str, str]]] = {}

    def emit(ev: EngineEvent, _why: object) -> None:
        log.setdefault(ev.request_id, []).append((ev.kind, ev.text))

    s = Scheduler(eng, max_batch=4)
    for i, (pre, suf, plan) in enumerate(PROMPTS):
        eng.prompt_cache.clear()
        s.submit(CompletionRequest(f"solo{i}", f"a{i}", pre, suf, plan), "owner", emit)
        run(s, log, [f"solo{i}"])
    eng.prompt_cache.clear()
    for i, (pre, suf, plan) in enumerate(PROMPTS):
        s.submit(CompletionRequest(f"b{i}", f"b{i}", pre, suf, plan), f"owner{i}", emit)
    run(s, log, [f"b{i}" for i in range(len(PROMPTS))])
    assert s.counters["max_batch_seen"] == len(PROMPTS)
    for i, (pre, suf, plan) in enumerate(PROMPTS):
        assert log[f"solo{i}"][-1][0] == "done"
        assert log[f"b{i}"] == log[f"solo{i}"]
        eng.prompt_cache.clear()
        alone = [(e.kind, e.text) for e in eng.complete(CompletionRequest(f"ip{i}", f"c{i}", pre, suf, plan))]
        assert alone == log[f"solo{i}"]


@pytest.mark.parametrize("write, family", [(write_llada2, "llada2"), (write_llada, "llada"), (write_dream, "dream")])
def test_family_alternatives_match_in_process(write: Callable[[Path], Path], family: str, tmp_path: Path) -> None:
    path = write(tmp_path / family)
    char_tokenizer(path)
    eng = TextEngine(path, threads=1, max_len=256, max_prompt_tokens=64)
    req = CompletionRequest("r", "d", "def f(x):\n    return ", "\n", Plan(max_tokens=8, preset="quality"))
    eng.prompt_cache.clear()
    alone = list(eng.complete(req))
    done: list[EngineEvent] = []
    s = Scheduler(eng, max_batch=4)
    eng.prompt_cache.clear()
    s.submit(req, "owner", lambda ev, code: done.append(ev))
    for _ in range(1000):
        if done and done[-1].kind in ("done", "error"):
            break
        s.step()
    assert done[-1].kind == "done" and alone[-1].kind == "done"
    assert done[-1].text == alone[-1].text and done[-1].alternatives == alone[-1].alternatives
    assert alone[-1].alternatives and alone[-1].text not in alone[-1].alternatives
    assert s.counters["max_batch_seen"] > 1 and len(s.free_rows) == 4
