"""One real completion from a live SGLang server (docs/scale-out.md, "Check the setup").

Runs only when LLADA_SGLANG_URL names a server (e.g. http://gpu1:30000, launched with a
LLaDA2.x model) and LLADA_SGLANG_MODEL names its tokenizer (a local checkpoint directory or a
Hugging Face repo id already in the local cache); skipped otherwise."""

from __future__ import annotations

import asyncio
import os

import pytest

from engine.api import CompletionRequest, Plan
from llada_lsp.engines.sglang_engine import SglangEngineClient
from llada_lsp.engines.sglang_servers import SglangConfig

URL = os.environ.get("LLADA_SGLANG_URL", "")
MODEL = os.environ.get("LLADA_SGLANG_MODEL", "")

pytestmark = [
    pytest.mark.asyncio(loop_scope="function"),
    pytest.mark.skipif(not URL or not MODEL, reason="no live SGLang server: set LLADA_SGLANG_URL=http://host:port "
                       "and LLADA_SGLANG_MODEL=<its tokenizer dir or cached HF repo id> to run it"),
]


async def test_one_real_completion() -> None:
    eng = SglangEngineClient(SglangConfig(urls={"speedy": [URL]}, model=MODEL, start_timeout_s=300.0))
    try:
        await eng.start(lambda m, p: None)
        assert eng.state == "ready", eng.error
        job = eng.submit(CompletionRequest("live", "file:///live.py", "def fibonacci(n):\n    ", "\n",
                                           Plan(max_tokens=64, stop="dedent", indent="    ")))
        events = [ev async for ev, _ in job.events()]
        done = events[-1]
        assert done.kind == "done" and done.reason in ("end_of_middle", "stop_rule", "budget"), done
        assert done.text.strip() and (done.stats or {})["tokens"] > 0
        print(f"live completion ({done.reason}, {(done.stats or {})['total_ms']:.0f} ms): {done.text!r}")
    finally:
        await asyncio.wait_for(eng.close(), 10)
