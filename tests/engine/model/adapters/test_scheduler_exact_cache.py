"""The daemon's prompt cache holds exact KV only (issue 30): for a bidirectional model (LLaDA-8B,
Dream) every cached entry goes stale once the middle changes, so the scheduler neither stores
one (~512 KB a token for LLaDA-8B) nor restores one; a block-causal model's still does both."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from engine.api import CompletionRequest, EngineEvent, Plan
from engine.decoding.scheduler import Scheduler
from engine.service import TextEngine
from tests.engine.model.adapters.test_adapter_service import char_tokenizer
from tests.engine.model.adapters.tiny_ckpts import write_dream, write_llada, write_llada2

FAMILIES = [(write_llada2, "llada2", True), (write_llada, "llada", False), (write_dream, "dream", False)]


def finish(s: Scheduler, done: dict[str, EngineEvent], rid: str) -> EngineEvent:
    for _ in range(1000):
        if rid in done:
            return done.pop(rid)
        s.step()
    raise AssertionError("request did not finish")


@pytest.mark.parametrize(("write", "family", "exact"), FAMILIES)
def test_scheduler_caches_prompts_only_when_the_cache_is_exact(write: Callable[[Path], Path], family: str,
                                                               exact: bool, tmp_path: Path) -> None:
    path = write(tmp_path / family)
    char_tokenizer(path)
    eng = TextEngine(path, threads=1, max_len=256, max_prompt_tokens=64)
    assert eng.exact_cache == exact
    done: dict[str, EngineEvent] = {}

    def emit(ev: EngineEvent, _why: object) -> None:
        if ev.kind in ("done", "error"):
            done[ev.request_id] = ev

    s = Scheduler(eng, max_batch=2)
    eng.prompt_cache.clear()
    req = CompletionRequest("r", "doc", "def f(x):\n    return ", "\n", Plan(max_tokens=8, preset="speedy"))
    s.submit(req, "owner", emit)
    first = finish(s, done, "r")
    assert first.kind == "done"
    assert len(eng.prompt_cache.entries) == (1 if exact else 0)  # stored only when exact
    # a remask of the same prompt: an exact cache restores it; an approximate one is never read,
    # even when an entry for the very prompt is there
    prompt = s.finished[("owner", "r")].seq.prompt  # type: ignore[union-attr]
    if not exact:
        eng.prompt_cache.store(eng.model, 0, "doc", prompt, owner="owner")
    s.remask("r", [(0, 1)], "owner", emit)
    again = finish(s, done, "r")
    assert again.kind == "done" and again.stats is not None
    if exact:
        assert again.stats["reused_tokens"] > 0
    else:
        assert again.stats["reused_tokens"] == 0 and again.stats["prefill_tokens"] == len(prompt)
