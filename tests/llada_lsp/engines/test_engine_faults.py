"""A lost, frozen or refusing engine daemon (issue 31, item 7), with real processes and signals:
the real server over stdio, real daemons on 127.0.0.1, SIGKILL / SIGSTOP / SIGCONT.

Each fault is shown to the client once (`llada/status` error + one `window/showMessage`), the
engine state leaves "ready", requests are answered (empty) instead of blocking, and the server
reconnects: with `auto` it starts a fresh daemon (a frozen one is unregistered and sent SIGTERM,
which it handles once continued); with a URL it retries until the daemon is back.
Recovery times are measured in bench/soak.py, not asserted here."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from lsprotocol import types as t

from engine.api import CompletionRequest, EngineEvent, Plan
from engine.daemon import runtime
from llada_lsp.engines.engine_client import TIMED_OUT, EngineClient, EngineJob, Progress
from tests.llada_lsp.lsp_helpers import (
    DATA,
    ROOT,
    debug_info,
    inline,
    needs_model,
    open_doc,
    poll,
    position_of,
    server_config,
    server_session,
)

pytestmark = [pytest.mark.asyncio(loop_scope="function")]
BASE = {"maxTokens": {"line": 8, "statements": 8, "block": 8}, "speculative": False,
        "rescueAlternatives": 0, "syntaxRemaskPasses": 0}


# -- real daemons ---------------------------------------------------------------------------------
def start_daemon(run: Path, port: int = 0) -> tuple[subprocess.Popen[bytes], dict[str, Any]]:
    """`llada-engine serve` registered in `run` (its own runtime dir); its runtime file info."""
    runtime.secure_dir(run)
    stale = runtime.read_runtime(run)
    env = {**os.environ, "LLADA_RUNTIME_DIR": str(run), "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "engine.daemon.cli", "serve", "--port", str(port), "--threads", "1",
           "--token-file", str(run / runtime.TOKEN_NAME)]
    with os.fdopen(runtime.open_private_log(run / runtime.LOG_NAME), "ab") as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    deadline = 120.0
    waited = 0.0
    while True:  # the runtime file names this process once it serves (polling a file)
        found = runtime.read_runtime(run)
        if found is not None and found != stale and found.get("pid") == proc.pid:
            return proc, found
        if proc.poll() is not None or waited > deadline:
            raise RuntimeError((run / runtime.LOG_NAME).read_text()[-3000:])
        waited += 0.05
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(0.05)


def stop(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, signal.SIGCONT)
        proc.kill()
    proc.wait(10)


def gone(pid: int) -> bool:
    """The process has exited (a zombie counts: its parent, the server, reaps it later)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state in ("Z", "X")


@contextlib.asynccontextmanager
async def session(init: dict[str, Any], run: Path) -> AsyncIterator[Any]:
    async with server_session({**BASE, **init}, LLADA_RUNTIME_DIR=str(run)) as client:
        yield client


def states(client: Any) -> list[str]:
    return [s["state"] for s in client.statuses]


def shown(client: Any, words: str) -> list[str]:
    return [m.message for m in client.messages if words in m.message]


async def ask(client: Any, uri: str, text: str, needle: str = "        return math."
              ) -> t.InlineCompletionList | None:
    """One inline request; it must be answered (never block) while the engine is away."""
    return await asyncio.wait_for(inline(client, uri, position_of(text, needle)), 30)


# -- deadlines (no daemon) ------------------------------------------------------------------------
async def test_a_job_without_events_ends_at_its_first_event_deadline() -> None:
    told: list[EngineJob] = []
    job = EngineJob(CompletionRequest("r1", "file:///x.py", "a = ", "", Plan()), asyncio.get_running_loop(),
                    first_deadline_s=0.05, deadline_s=60.0, on_timeout=told.append)
    events = [ev async for ev, _ in job.events()]
    assert [e.kind for e in events] == ["error"] and TIMED_OUT in (events[0].error or "")
    assert job.cancelled and job.cancel_reason == "timeout" and told == [job]


async def test_a_job_with_a_first_event_still_has_an_overall_deadline() -> None:
    job = EngineJob(CompletionRequest("r2", "file:///x.py", "a = ", "", Plan()), asyncio.get_running_loop(),
                    first_deadline_s=60.0, deadline_s=0.2)
    job.push(EngineEvent("draft", "r2", "1"))
    events = [ev.kind async for ev, _ in job.events()]
    assert events == ["draft", "error"] and job.cancel_reason == "timeout"


class Unwired(EngineClient):
    """A transport that sends nothing and records its cancels: the bookkeeping alone, which
    every client (in-process, daemon, SGLang) shares."""

    def __init__(self) -> None:
        super().__init__()
        self.wire: list[str] = []

    async def start(self, progress: Progress) -> None:
        self.state = "ready"

    def submit(self, request: CompletionRequest) -> EngineJob:
        job = self.new_job(request, EngineJob)
        self.start_job(job)
        return job

    def send_cancel(self, job: EngineJob) -> None:
        self.wire.append(job.request.request_id)

    async def close(self) -> None:
        self.cancel_all()


def _req(rid: str, doc: str = "file:///x.py") -> CompletionRequest:
    return CompletionRequest(rid, doc, "a = ", "", Plan())


async def test_one_bookkeeping_supersedes_counts_and_ends_a_job_once() -> None:
    eng = Unwired()
    old = eng.submit(_req("a"))
    new = eng.submit(_req("b"))
    # the one rule: the older job of the document is cancelled on the wire (every client: the
    # engine below decides no supersession) and no longer runs
    assert old.cancel_reason == "superseded" and eng.wire == ["a"] and eng.running() == 1
    eng.deliver(old, EngineEvent("done", "a", "", reason="cancelled"))  # the engine's answer to the cancel
    eng.deliver(old, EngineEvent("done", "a", "", reason="cancelled"))  # a second end is dropped
    # its reader hears why: superseded
    assert [ev.reason async for ev, _ in old.events()] == ["superseded"] and eng.counters["cancelled"] == 1
    new.cancel()
    new.cancel()  # once on the wire
    eng.end_cancelled(new, "a = 1")
    assert eng.wire == ["a", "b"] and [(ev.reason, ev.text) async for ev, _ in new.events()] == [("cancelled", "a = 1")]
    assert eng.running() == 0 and eng.counters["max_running_per_doc"] == 1
    assert (eng.counters["submitted"], eng.counters["engine_calls"], eng.counters["cancelled"]) == (2, 2, 2)
    # a request of another document ends nothing
    eng.submit(_req("c", "file:///y.py"))
    eng.submit(_req("d", "file:///z.py"))
    assert eng.wire == ["a", "b"] and eng.running() == 2
    # a job cancelled before it reached the engine ends at once, skipped and not cancelled
    early = eng.new_job(_req("e", "file:///w.py"), EngineJob)
    early.cancel()
    eng.skip(early)
    assert [ev.reason async for ev, _ in early.events()] == ["cancelled"]
    assert (eng.counters["skipped"], eng.counters["cancelled"]) == (1, 2)
    await eng.close()
    assert eng.wire == ["a", "b", "e", "c", "d"]  # shutdown cancels what is still live, on the wire


async def test_a_job_decoded_ahead_is_spared_by_the_arrival_only() -> None:
    """A speculation (`ahead`) may answer the request whose arrival would end it: that arrival
    spares it, and its later jobs (a rescue: the same request id); a newer job of the document,
    or the document's close, ends it."""
    eng = Unwired()
    ahead = eng.submit(_req("s1"))
    ahead.ahead = True
    eng.supersede("file:///x.py", spare_ahead=True)  # the next request arrives
    assert not ahead.cancelled and eng.wire == [] and eng.running() == 1
    eng.deliver(ahead, EngineEvent("done", "s1", "", reason="end_of_middle"))
    rescue = eng.submit(_req("s1"))  # decoded again with more candidates: the same request
    assert rescue.ahead
    eng.supersede("file:///x.py", spare_ahead=True)
    assert not rescue.cancelled
    newer = eng.submit(_req("7"))  # the request's own job
    assert rescue.cancel_reason == "superseded" and eng.wire == ["s1"] and not newer.ahead
    eng.supersede("file:///x.py", spare_ahead=True)  # a newer request's arrival ends a request's job
    assert newer.cancel_reason == "superseded" and eng.wire == ["s1", "7"]
    last = eng.submit(_req("8"))
    eng.supersede("file:///x.py", "closed")
    assert last.cancel_reason == "closed" and eng.wire == ["s1", "7", "8"] and eng.running() == 0
    await eng.close()


async def test_a_timed_out_job_no_longer_runs_for_its_document() -> None:
    """Issue 50 (the soak's max_inflight_per_doc 2 at load 20-30): a job past its deadline is
    cancelled and finished, but its transport releases it only when the engine's answer to the
    cancel arrives; the next request of the document supersedes only unfinished jobs, so the
    timed-out one must stop counting at its timeout, not at its release."""
    eng = Unwired()
    eng.set_deadlines(50, 60_000)
    eng.pace.observe(0.001, 1)  # a measured, fast model: the 50 ms floor is the deadline
    old = eng.submit(_req("a"))
    assert [ev.kind async for ev, _ in old.events()] == ["error"] and eng.counters["timeouts"] == 1
    new = eng.submit(_req("b"))
    assert eng.running() == 1 and eng.counters["max_running_per_doc"] == 1
    eng.release(old)  # the engine's done of the cancel, later
    eng.deliver(new, EngineEvent("done", "b", "x", reason="stop"))
    assert eng.running() == 0 and eng.counters["max_running_per_doc"] == 1
    assert "stuck: a request got no answer in 0.05 s" in eng.pace.text


# -- a daemon at a URL ----------------------------------------------------------------------------
@needs_model
async def test_url_daemon_killed_then_back_is_reported_once_each(tmp_path: Path) -> None:
    proc, info = start_daemon(tmp_path / "d")
    port = int(info["port"])
    procs = [proc]
    try:
        async with session({"engine": info["url"], "engineToken": info["token"]}, tmp_path / "s") as client:
            text = (DATA / "shapes.py.txt").read_text()
            uri = open_doc(client, "shapes.py.txt", "python", uri=(DATA / "fault_url.py").as_uri())
            await ask(client, uri, text)
            proc.kill()
            proc.wait(10)
            await poll(lambda: "error" in states(client), 10)
            assert (await debug_info(client))["engineState"] == "error"
            for _ in range(5):  # answered at once (empty), no daemon
                res = await ask(client, uri, text)
                assert res is None or not res.items
            procs.append(start_daemon(tmp_path / "d", port)[0])
            await poll(lambda: states(client)[-1] == "ready", 30)
            # the message follows the status notification on the wire: wait for it too
            await poll(lambda: bool(shown(client, "is back")), 10)
            assert len(shown(client, "unavailable")) == 1, [m.message for m in client.messages]
            assert len(shown(client, "is back")) == 1
            info2 = await debug_info(client)
            assert info2["engineState"] == "ready" and info2["engine"]["reconnected"] == 1
            await ask(client, uri, text)
            assert (await debug_info(client))["engineState"] == "ready"
    finally:
        for p in procs:
            stop(p)


@needs_model
async def test_url_daemon_frozen_does_not_block_a_request(tmp_path: Path) -> None:
    proc, info = start_daemon(tmp_path / "d")
    try:
        async with session({"engine": info["url"], "engineToken": info["token"]}, tmp_path / "s") as client:
            text = (DATA / "shapes.py.txt").read_text()
            uri = open_doc(client, "shapes.py.txt", "python", uri=(DATA / "fault_frozen.py").as_uri())
            await ask(client, uri, text)
            before = (await debug_info(client))["engine"]["engine_calls"]
            os.kill(proc.pid, signal.SIGSTOP)
            # another place than the one asked before (its answer is in the suggestion cache)
            answers = await asyncio.gather(*(ask(client, uri, text, "        b = ") for _ in range(6)))
            assert all(r is None or not r.items for r in answers)  # answered, not after 50 s
            info1 = await debug_info(client)
            assert info1["engine"]["engine_calls"] - before >= 2, info1["engine"]
            assert info1["engine"]["max_running_per_doc"] == 1  # each newer request ended the older stream
            await poll(lambda: "error" in states(client), 10)
            assert "stopped answering" in client.statuses[-1]["message"] or "retrying" in client.statuses[-1]["message"]
            os.kill(proc.pid, signal.SIGCONT)
            await poll(lambda: states(client)[-1] == "ready", 30)
            assert len(shown(client, "unavailable")) == 1 and len(shown(client, "is back")) == 1
            assert not gone(proc.pid)  # a URL's daemon is never stopped by the server
    finally:
        stop(proc)


@needs_model
async def test_url_daemon_refusing_the_token_is_reported_and_retried(tmp_path: Path) -> None:
    proc, info = start_daemon(tmp_path / "d")
    try:
        client = await server_config(LLADA_RUNTIME_DIR=str(tmp_path / "s")).start()
        try:
            await client.initialize_session(t.InitializeParams(
                capabilities=t.ClientCapabilities(), initialization_options={
                    **BASE, "engine": info["url"], "engineToken": "wrong"}))
            await poll(lambda: "error" in states(client), 30)
            # the outage's window/showMessage follows its llada/status: wait for it, then read it
            await poll(lambda: client.messages, 30)
            assert any("refused" in m.message or "did not start" in m.message for m in client.messages), \
                [m.message for m in client.messages]
            info2 = await poll(lambda: _retried(client), 30)
            assert info2["engineState"] == "error"
        finally:
            with contextlib.suppress(Exception):  # noqa: BLE001 - teardown goes on
                await asyncio.wait_for(client.shutdown_session(), 10)
            await client.stop()
    finally:
        stop(proc)


async def _retried(client: Any) -> dict[str, Any] | None:
    info = await debug_info(client)
    return info if info["engine"].get("connect_errors", 0) >= 2 else None


# -- auto ---------------------------------------------------------------------------------------
@needs_model
async def test_auto_replaces_a_killed_and_a_frozen_daemon(tmp_path: Path) -> None:
    run = tmp_path / "run"
    frozen: int | None = None
    try:
        async with session({"engine": "auto"}, run) as client:
            text = (DATA / "shapes.py.txt").read_text()
            uri = open_doc(client, "shapes.py.txt", "python", uri=(DATA / "fault_auto.py").as_uri())
            first = (await debug_info(client))["engineInfo"]["daemon_pid"]
            os.kill(first, signal.SIGKILL)
            await poll(lambda: states(client).count("ready") >= 2, 60)
            second = (await debug_info(client))["engineInfo"]["daemon_pid"]
            assert second != first and runtime.read_runtime(run)["pid"] == second  # type: ignore[index]
            await ask(client, uri, text)
            os.kill(second, signal.SIGSTOP)
            frozen = second
            await poll(lambda: states(client).count("ready") >= 3, 60)
            third = (await debug_info(client))["engineInfo"]["daemon_pid"]
            assert third not in (first, second) and runtime.read_runtime(run)["pid"] == third  # type: ignore[index]
            assert len(shown(client, "unavailable")) == 2 and len(shown(client, "is back")) == 2
            await ask(client, uri, text)
            os.kill(second, signal.SIGCONT)  # the pending SIGTERM ends it; it leaves the new file alone
            frozen = None
            await poll(lambda: gone(second), 30)
            assert runtime.read_runtime(run)["pid"] == third  # type: ignore[index]
            assert json.loads((run / runtime.RUNTIME_NAME).read_text())["pid"] == third
    finally:
        if frozen is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(frozen, signal.SIGKILL)
        await asyncio.to_thread(runtime.stop_daemon, run)
