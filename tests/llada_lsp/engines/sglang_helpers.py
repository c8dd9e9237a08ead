"""Helpers of the SGLang backend tests: a FAKE SGLang server (tests.fakes.sglang, loopback, no
model) with a fake LLaDA2 checkpoint directory (tests.fakes.checkpoint) for the local tokenizer."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from engine.api import CompletionRequest, EngineEvent, Plan
from llada_lsp.engines.engine_base import EngineJob
from llada_lsp.engines.sglang_engine import SglangEngineClient
from llada_lsp.engines.sglang_servers import SglangConfig
from tests.fakes.checkpoint import END_OF_MIDDLE, llada2_dir
from tests.fakes.sglang import FakeSglang

REPLY = "    return a + b\n\ndef sub(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a * b\n"
PREFIX = "def add(a, b):\n"


def fake(tok: Path, **kw: Any) -> FakeSglang:
    """A FAKE SGLang 0.5.23 server speaking the fake checkpoint's ids."""
    opts: dict[str, Any] = {"reply": REPLY, "tokenizer": tok, "end_token_id": END_OF_MIDDLE, "block_size": 8,
                            "block_delay_ms": 5.0, "max_running_requests": 8}
    return FakeSglang(**{**opts, **kw})


def client(tok: Path, urls: dict[str, list[str]] | None = None, router: str | None = None,
           **kw: Any) -> SglangEngineClient:
    cfg = SglangConfig(urls=urls or {}, router=router, model=str(tok), start_timeout_s=kw.pop("start_timeout_s", 10.0),
                       retry_cap_s=kw.pop("retry_cap_s", 0.2), **kw)
    return SglangEngineClient(cfg)


async def started(eng: SglangEngineClient, timeout: float = 20.0) -> SglangEngineClient:
    """`eng` started (within `timeout` seconds) and ready."""
    await asyncio.wait_for(eng.start(lambda m, p: None), timeout)
    assert eng.state == "ready", eng.error
    return eng


@contextlib.asynccontextmanager
async def serving(tok: Path, server: FakeSglang | None = None, **kw: Any
                  ) -> AsyncIterator[tuple[Any, SglangEngineClient]]:
    """`server` (else `fake(tok, **kw)`) started and a started client with it as the speedy
    preset's server; both stopped afterwards, whatever happens."""
    server = server if server is not None else fake(tok, **kw)
    url = await server.start()
    eng = client(tok, {"speedy": [url]})
    try:
        yield server, await started(eng)
    finally:
        await eng.close()
        await server.stop()


def request(rid: str = "1", doc: str = "file:///a.py", plan: Plan | None = None, prefix: str = PREFIX) -> CompletionRequest:
    return CompletionRequest(rid, doc, prefix, "", plan or Plan(max_tokens=64))


async def collect(job: EngineJob, timeout: float = 10.0) -> list[EngineEvent]:
    async def run() -> list[EngineEvent]:
        return [ev async for ev, _ in job.events()]

    return await asyncio.wait_for(run(), timeout)


async def first_draft(job: EngineJob, timeout: float = 10.0) -> EngineEvent:
    async def run() -> EngineEvent:
        async for ev, _ in job.events():
            if ev.kind == "draft" or ev.kind in ("done", "error"):
                return ev
        raise AssertionError("no event")

    return await asyncio.wait_for(run(), timeout)


__all__ = ["PREFIX", "REPLY", "client", "collect", "fake", "first_draft", "llada2_dir", "request", "serving",
           "started"]
