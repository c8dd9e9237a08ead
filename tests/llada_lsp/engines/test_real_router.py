"""The real `sglang-router` 0.3.2 (PyPI, a dev extra; its HTTP server is Rust and runs on the
CPU) in front of two FAKE SGLang workers (tests.fakes.sglang): the client finds it ready and
lists its workers, a completion goes through it with its rid unchanged, and a cancelled
request's abort reaches every worker (the router has no `/abort_request`). The router keeps
worker connections alive between requests, which the fake serves (keep-alive)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import sys
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path

import pytest
import pytest_asyncio

from engine.api import Plan
from llada_lsp.engines import http_client as http
from llada_lsp.engines import reconnect
from llada_lsp.engines.sglang_engine import SglangJob
from tests.fakes.sglang import FakeSglang
from tests.llada_lsp.engines.sglang_helpers import (
    REPLY,
    client,
    collect,
    fake,
    first_draft,
    llada2_dir,
    request,
    started,
)

pytestmark = [pytest.mark.asyncio(loop_scope="function")]
pytest.importorskip("sglang_router", reason="the dev extra sglang-router==0.3.2 is not installed (./dev sets it up)")


def abort_heard(worker: FakeSglang, rid: str) -> bool:
    return any(r.rid == rid for r in worker.abort_log)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def until_ready(url: str, proc: asyncio.subprocess.Process, timeout: float = 60.0) -> None:
    """Polls the router's `/readiness` (the router starts in a second or two)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    for delay in reconnect.backoff(start=0.05, cap=0.5):
        assert proc.returncode is None, "the router exited"
        with contextlib.suppress(http.HttpError):
            resp = await http.request(url, "GET", "/readiness", connect_timeout=1.0, read_timeout=5.0)
            await resp.body()
            if resp.status == 200:
                return
        assert loop.time() < deadline, "the router did not become ready"
        await asyncio.sleep(delay)  # the poll schedule, not a synchronisation


@pytest_asyncio.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[tuple[str, Path, list[FakeSglang]]]:
    async with router_cluster(tmp_path) as c:
        yield c


@contextlib.asynccontextmanager
async def router_cluster(tmp_path: Path, *router_args: str) -> AsyncIterator[tuple[str, Path, list[FakeSglang]]]:
    """The real router (round robin, `router_args`) in front of two fake workers."""
    tok = llada2_dir(tmp_path / "llada2")
    # model_path is the local checkpoint: the router loads its tokenizer from there, never the Hub
    workers = [fake(tok, reply=REPLY * 4, block_delay_ms=20.0, model_path=str(tok)) for _ in range(2)]
    urls = [await w.start() for w in workers]
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "sglang_router.launch_router", "--host", "127.0.0.1", "--port", str(port),
        "--worker-urls", *urls, "--policy", "round_robin", "--log-level", "warn",
        *router_args, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        await until_ready(url, proc)
        yield url, tok, workers
    finally:
        if proc.returncode is None:
            proc.terminate()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(proc.wait(), 10)
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        for w in workers:
            await w.stop()


async def test_ready_completion_and_abort_fan_out_through_the_real_router(
        cluster: tuple[str, Path, list[FakeSglang]]) -> None:
    url, tok, workers = cluster
    eng = client(tok, router=url)
    try:
        await started(eng, 30)
        assert eng.pool is not None and eng.info["servers"][0]["workers"] == 2  # a count: their URLs are internal
        assert sorted(eng.pool.servers[0].workers) == sorted(f"http://127.0.0.1:{w.port}" for w in workers)
        # completions through the router, its rid unchanged on the worker
        for i in range(3):
            done = (await collect(eng.submit(request(str(i), doc=f"file:///{i}.py", plan=Plan(max_tokens=16)))))[-1]
            assert done.kind == "done" and done.text, done
            assert any(done.stats and done.stats["rid"] in w.received_rids for w in workers)
        assert all(w.requests_received >= 1 for w in workers)  # round robin reached both
        # a cancelled stream: its one abort goes to every worker; the one that holds it ends it
        job = eng.submit(request("c", doc="file:///c.py", plan=Plan(max_tokens=300)))
        assert (await first_draft(job)).kind == "draft"
        job.cancel()
        assert (await collect(job))[-1].reason == "cancelled"
        assert isinstance(job, SglangJob)
        rid = job.rid
        holder = next(w for w in workers if rid in w.received_rids)
        await holder.wait_for(lambda: rid in holder.aborted_rids)
        for w in workers:
            await w.wait_for(partial(abort_heard, w, rid))
        assert holder.timings[rid].finished is not None
    finally:
        await eng.close()


@pytest.mark.parametrize("router_args", [("--disable-retries",), ()], ids=["router retries off", "router defaults"])
async def test_a_dead_worker_is_retried_on_a_live_one_and_never_named(tmp_path: Path,
                                                                      router_args: tuple[str, ...]) -> None:
    """One of two workers dies; the router (with its own retries off it answers HTTP 500
    naming the worker, as it does when its retries fail too) is asked again: every completion
    arrives, the state never leaves ready. Once both are dead, what the editor sees names the
    router, never a worker's URL."""
    async with router_cluster(tmp_path, *router_args) as (url, tok, workers):
        eng = client(tok, router=url)
        heard: list[tuple[str, str]] = []
        try:
            await started(eng, 30)
            eng.on_state = lambda state, msg: heard.append((state, msg))
            await workers[1].stop()
            for i in range(6):
                done = (await collect(eng.submit(request(str(i), doc=f"file:///{i}.py", plan=Plan(max_tokens=16)))))[-1]
                assert done.kind == "done" and done.text, done
            assert heard == [] and eng.state == "ready"
            assert eng.counters["retries"] >= (1 if router_args else 0)
            await workers[0].stop()
            errors = [(await collect(eng.submit(request(f"x{i}", plan=Plan(max_tokens=16)))))[-1] for i in range(4)]
            assert all(e.kind == "error" for e in errors), errors
            shown = [e.error or "" for e in errors] + [m for _, m in heard] + [str(eng.info["servers"])]
            assert any(url in m for m in shown)
            for w in workers:
                assert not [m for m in shown if f":{w.port}" in m], shown
        finally:
            await eng.close()
