"""One step loop (issue 32): the language server's in-process engine and the daemon's scheduler
are the same code, so the same requests give the same tokens, texts and forward counts; and no
module outside the loop drives the model's forwards."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.api import CompletionRequest, EngineEvent, Plan
from engine.decoding.rejections import Rejection
from engine.decoding.scheduler import Scheduler
from engine.service import TextEngine
from llada_lsp.engines.engine_client import InProcessEngine

ROOT = Path(__file__).resolve().parents[3]
PREFIX = ("import os\n\n\ndef read_lines(path):\n    \"\"\"The stripped lines of a text file.\"\"\"\n"
          "    with open(path) as f:\n")
SUFFIX = "\n\n\ndef main():\n    print(read_lines(os.environ['FILE']))\n"
REQUESTS = [
    CompletionRequest("line", "a.py", PREFIX, SUFFIX, Plan(max_tokens=16, stop="line")),
    CompletionRequest("body", "b.py", PREFIX, SUFFIX, Plan(max_tokens=32, max_lines=3, preset="speedy")),
    # quality: alternatives ride along on more rows, their forwards counted on the request
    CompletionRequest("alts", "c.py", PREFIX, SUFFIX, Plan(max_tokens=24, max_lines=2, preset="quality")),
    CompletionRequest("base", "d.py", "def add(a, b):\n    ", "", Plan(max_tokens=12, preset="one_per_step")),
]


@pytest.fixture(scope="module")
def eng() -> Iterator[TextEngine]:
    yield TextEngine(threads=1)  # the embedded model, trained and committed


def outcome(ev: EngineEvent) -> tuple[object, ...]:
    st = ev.stats or {}
    return (ev.kind, ev.reason, ev.text, ev.alternatives, st.get("forwards"), st.get("tokens"),
            st.get("primary_forwards"), st.get("alternative_rows"))


def through_the_daemons_scheduler(eng: TextEngine) -> dict[str, EngineEvent]:
    s = Scheduler(eng, max_batch=4)
    last: dict[str, EngineEvent] = {}

    def emit(ev: EngineEvent, _why: Rejection | None) -> None:
        last[ev.request_id] = ev

    for req in REQUESTS:  # one at a time, each from an empty prompt cache
        eng.prompt_cache.clear()
        s.submit(req, "connection-1", emit)
        for _ in range(3000):
            s.step()
            if req.request_id in last and last[req.request_id].kind in ("done", "error"):
                break
    return last


async def through_the_in_process_client(eng: TextEngine) -> dict[str, EngineEvent]:
    client = InProcessEngine(factory=lambda *_a, **_k: eng)
    await client.start(lambda _m, _p: None)
    assert client.ready, client.error
    client.set_deadlines(0, 0)
    last: dict[str, EngineEvent] = {}
    try:
        for req in REQUESTS:
            eng.prompt_cache.clear()  # the loop's thread is idle between requests
            job = client.submit(req)
            async for ev, _t in job.events():
                last[req.request_id] = ev
    finally:
        await client.close()
    return last


def test_in_process_and_daemon_give_the_same_tokens_and_counts(eng: TextEngine) -> None:
    daemon = through_the_daemons_scheduler(eng)
    in_process = asyncio.run(through_the_in_process_client(eng))
    local = {}
    for req in REQUESTS:  # the engine's own loop from the calling thread (CLI, benches)
        eng.prompt_cache.clear()
        local[req.request_id] = list(eng.complete(req))[-1]
    for req in REQUESTS:
        rid = req.request_id
        assert daemon[rid].kind == "done" and daemon[rid].stats is not None, daemon[rid]
        assert outcome(in_process[rid]) == outcome(daemon[rid]) == outcome(local[rid]), rid
    assert daemon["alts"].stats["alternative_rows"] > 0  # the quality case ran forks: not vacuous
    assert daemon["alts"].stats["forwards"] > daemon["alts"].stats["primary_forwards"]


def test_in_process_supersede_and_cancel_are_the_loops(eng: TextEngine) -> None:
    async def run() -> tuple[list[EngineEvent], list[EngineEvent], list[EngineEvent]]:
        client = InProcessEngine(factory=lambda *_a, **_k: eng)
        await client.start(lambda _m, _p: None)
        client.set_deadlines(0, 0)
        long = Plan(max_tokens=64, preset="one_per_step")
        try:
            old = client.submit(CompletionRequest("old", "same.py", PREFIX, SUFFIX, long))
            new = client.submit(CompletionRequest("new", "same.py", PREFIX, SUFFIX, Plan(max_tokens=4)))
            other = client.submit(CompletionRequest("other", "other.py", PREFIX, SUFFIX, long))
            got_other: list[EngineEvent] = []
            async for ev, _t in other.events():
                got_other.append(ev)
                if len(got_other) == 1:
                    other.cancel()
            return ([e async for e, _ in old.events()], [e async for e, _ in new.events()], got_other)
        finally:
            await client.close()

    old, new, other = asyncio.run(run())
    assert old[-1].kind == "done" and old[-1].reason == "superseded"
    assert new[-1].kind == "done" and new[-1].reason != "superseded"
    assert other[-1].kind == "done" and other[-1].reason == "cancelled"
    assert other[-1].stats is not None and other[-1].stats["forwards"] < 64


# a forward of the model is run by `engine.decoding.batch.execute`; the step loop is its only caller
# (engine/train's teacher decoding for distillation is training, never run by the server)
EXECUTE_CALL = re.compile(r"(?<![\w.])execute\(")


def test_no_second_decode_loop() -> None:
    callers = []
    for root in ("engine", "llada_lsp", "bench"):
        for path in sorted((ROOT / root).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel.startswith("engine/train/"):
                continue
            text = path.read_text()
            if EXECUTE_CALL.search(text) and rel != "engine/decoding/batch.py":
                callers.append(rel)
            for gone in ("def generate(", "def run_group(", "def _run(self, req"):
                assert gone not in text, (rel, gone)
    assert callers == ["engine/decoding/scheduler.py"]
