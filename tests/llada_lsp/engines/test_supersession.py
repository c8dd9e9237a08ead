"""Supersession is decided once (issue 53, detour 1): per document key, the engine client's
`EngineClient.supersede` ends the older live job, with the ordinary cancel; the step loop, the
daemon and SGLang only cancel what they are told, and the services keep no jobs to end.

On the real in-process engine and a real daemon (the same tiny random checkpoint, which decodes
to its budget): a newer request for a document ends the older one's engine job exactly once
(one cancel in the engine's own counters, none "superseded" there), its reader hears
`superseded`, and a request for another document ends nothing."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from engine.api import CompletionRequest, EngineEvent, Plan
from engine.service import TextEngine
from llada_lsp.engines.engine_base import STOPPED, EngineClient, EngineJob
from llada_lsp.engines.engine_client import InProcessEngine
from llada_lsp.engines.ws_engine import WsEngineClient
from tests.engine.daemon.daemon_helpers import (
    Daemon,
    build_tiny_checkpoint,
    start_daemon,
    stop_daemon,
)

ROOT = Path(__file__).resolve().parents[3]
PREFIX = "def fibonacci(n):\n    if n < 2:\n        return n\n    "
LONG = Plan(max_tokens=200, preset="one_per_step")  # ~200 forwards: still running when superseded
SHORT = Plan(max_tokens=6, preset="one_per_step")

Stats = Callable[[], Awaitable[dict[str, Any]]]


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_checkpoint(tmp_path_factory.mktemp("tiny-model"))


@pytest.fixture(scope="module")
def daemon(tiny_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    d = start_daemon(tmp_path_factory.mktemp("run"), tiny_dir, "--max-batch", "4", "--prompt-cache", "0")
    yield d
    stop_daemon(d)


async def events(job: EngineJob) -> list[EngineEvent]:
    return [ev async for ev, _ in job.events()]


async def newest_wins(client: EngineClient, stats: Stats) -> None:
    before = await stats()
    old = client.submit(CompletionRequest("old", "same.py", PREFIX, "", LONG))
    async for ev, _ in old.events():  # it runs in the engine now
        assert ev.kind == "draft"
        break
    new = client.submit(CompletionRequest("new", "same.py", PREFIX, "", SHORT))
    other = client.submit(CompletionRequest("other", "other.py", PREFIX, "", SHORT))
    old_rest, new_evs, other_evs = await events(old), await events(new), await events(other)
    after = await stats()
    assert old_rest[-1].kind == "done" and old_rest[-1].reason == "superseded"
    assert old_rest[-1].step < 100  # ended before its budget
    for evs in (new_evs, other_evs):  # the newer one, and another document's: not ended
        assert evs[-1].kind == "done" and evs[-1].reason not in STOPPED, evs[-1]
    # the engine ended the older job once, told by a cancel; it decided no supersession itself
    assert after["cancelled"] - before["cancelled"] == 1 and after["completed"] - before["completed"] == 2
    assert "superseded" not in after
    c = client.counters
    assert (c["cancelled"], c["skipped"], c["max_running_per_doc"]) == (1, 0, 1)
    client.supersede("other.py")  # a request for a finished document's key: nothing to end
    assert (await stats())["cancelled"] == after["cancelled"] and client.counters["cancelled"] == 1


async def test_in_process_a_newer_request_ends_the_older_job_once(tiny_dir: Path) -> None:
    made: list[TextEngine] = []

    def factory(*args: Any, **kwargs: Any) -> TextEngine:
        made.append(TextEngine(*args, **kwargs))
        return made[0]

    client = InProcessEngine(str(tiny_dir), device="cpu", factory=factory, threads=1)
    await client.start(lambda _m, _p: None)
    assert client.ready, client.error
    client.set_deadlines(0, 0)

    async def stats() -> dict[str, Any]:
        return dict(made[0].loop().counters)

    try:
        await newest_wins(client, stats)
    finally:
        await client.close()


async def test_through_the_daemon_a_newer_request_ends_the_older_job_once(daemon: Daemon) -> None:
    client = WsEngineClient(daemon.url, token=daemon.token)
    await client.start(lambda _m, _p: None)
    assert client.ready, client.error
    client.set_deadlines(0, 0)

    async def stats() -> dict[str, Any]:
        assert client.conn is not None
        return dict((await client.conn.query("stats"))["stats"])

    try:
        await newest_wins(client, stats)
    finally:
        await client.close()


# a job ended as superseded anywhere but the rule: a cancel or a step-loop ending with that reason
ENDS_SUPERSEDED = re.compile(r"""(\.cancel|_finish)\([^)]*["']superseded["']""")


def test_no_second_place_decides_supersession() -> None:
    """Only `EngineClient.supersede` ends a job as superseded; the step loop keeps no job per
    document to supersede by. Fails when a service, a client or the loop decides it again."""
    found = []
    for path in [*sorted((ROOT / "llada_lsp").rglob("*.py")), *sorted((ROOT / "engine").rglob("*.py"))]:
        text = path.read_text(encoding="utf-8")
        rel = path.relative_to(ROOT).as_posix()
        found += [f"{rel}: {m.group(0)}" for m in ENDS_SUPERSEDED.finditer(text)]
        if rel.startswith("engine/decoding/") and "by_doc" in text:
            found.append(f"{rel}: a job per document (by_doc)")
    assert found == [], found
