"""`llada-lsp doctor` against the FAKE SGLang server (tests.fakes.sglang): a healthy setup passes
with a round trip, a wrong model family or a dead server fails with a readable line."""

from __future__ import annotations

import asyncio
import contextlib
import io
from pathlib import Path

import pytest

from llada_lsp.cli import main
from tests.fakes.sglang import FakeRouter
from tests.llada_lsp.engines.sglang_helpers import fake, llada2_dir

pytestmark = [pytest.mark.asyncio(loop_scope="function")]


async def doctor(*argv: str) -> tuple[int, str]:
    """The CLI in a worker thread (it runs its own event loop; the fake runs in this one)."""
    out = io.StringIO()

    def run() -> int:
        with contextlib.redirect_stdout(out):
            return main(["doctor", *argv])

    code = await asyncio.wait_for(asyncio.to_thread(run), 30)
    return code, out.getvalue()


async def test_doctor_passes_on_a_healthy_setup(tmp_path: Path) -> None:
    tok = llada2_dir(tmp_path / "llada2")
    a, b = fake(tok), fake(tok)
    ua, ub = await a.start(), await b.start()
    router = FakeRouter([ub])
    ur = await router.start()
    try:
        code, out = await doctor("--model", str(tok), "--sglang-url", f"speedy={ua}", "--sglang-router", ur,
                                 "--mode", "speedy", "--sglang-url", f"quality={ua}")
        assert code == 0, out
        assert f"server {ua}" in out and f"router {ur}" in out and "/ready: 200" in out and "/readiness: 200" in out
        assert f"/workers: {ub}" in out and "LLaDA2MoeModelLM" in out
        assert f"{ub}/server_info: --dllm-algorithm LowConfidence\n" in out  # what the worker runs
        assert out.count("/generate round trip:") == 2 and "all checks passed" in out
        assert a.requests_received == 1 and b.requests_received == 1
    finally:
        await router.stop()
        await a.stop()
        await b.stop()


async def test_doctor_fails_on_wrong_family_and_dead_server(tmp_path: Path) -> None:
    tok = llada2_dir(tmp_path / "llada2")
    wrong = fake(tok, model_path="meta-llama/Llama-3.1-8B", architectures=("LlamaForCausalLM",))
    url = await wrong.start()
    dead = fake(tok)
    dead_url = await dead.start()
    await dead.stop()
    try:
        code, out = await doctor("--model", str(tok), "--sglang-url", f"speedy={url}",
                                 "--sglang-url", f"quality={dead_url}")
        assert code == 1
        assert "FAIL" in out and "meta-llama/Llama-3.1-8B" in out and "not LLaDA-8B or Dream" in out
        assert f"{dead_url}/ready: cannot connect" in out and "check(s) failed" in out
    finally:
        await wrong.stop()
