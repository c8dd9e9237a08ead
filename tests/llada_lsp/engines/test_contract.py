"""Contract test: every request body the SGLang client sends passes SGLang 0.5.23's own request
handling, the pinned wheel's code (`sglang_contract_probe.py` says what runs and what is
stubbed; `sglang_wheel.py` fetches the wheel from PyPI once into the venv's cache).

The bodies are the ones the client really sent to the FAKE server (tests.fakes.sglang records
every POST): streamed completions of each preset and budget, with workspace context, a stop
rule that aborts, and a superseded request's abort."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from engine.api import ContextChunk, Plan
from tests.llada_lsp.engines.sglang_helpers import (
    client,
    collect,
    fake,
    first_draft,
    llada2_dir,
    request,
    started,
)
from tests.llada_lsp.engines.sglang_wheel import sources

pytestmark = [pytest.mark.asyncio(loop_scope="function")]
PROBE = Path(__file__).with_name("sglang_contract_probe.py")
LLADA2_VOCAB = 157184  # the served model's config.json vocab_size (LLaDA2.0/2.1 mini): SamplingParams.verify's bound


def verdicts(posts: list[tuple[str, Any]], vocab_size: int) -> list[dict[str, Any]]:
    lines = "".join(json.dumps([path, body]) + "\n" for path, body in posts)
    done = subprocess.run([sys.executable, str(PROBE), str(sources()), str(vocab_size)], input=lines,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return [json.loads(x) for x in done.stdout.splitlines()]


@pytest.fixture(scope="module")
def wheel() -> Path:
    return sources()


async def test_every_body_the_client_sends_passes_sglangs_own_checks(tmp_path: Path, wheel: Path) -> None:
    tok = llada2_dir(tmp_path / "llada2")
    a, b = fake(tok, block_delay_ms=10.0), fake(tok, block_delay_ms=10.0, reply="    return 1\n" * 30)
    ua, ub = await a.start(), await b.start()
    eng = await started(client(tok, {"speedy": [ua], "quality": [ub]}))
    try:
        for i, (preset, budget) in enumerate([("speedy", 16), ("quality", 64), ("speedy", 200)]):
            assert (await collect(eng.submit(request(str(i), plan=Plan(max_tokens=budget, preset=preset)))))[-1].kind == "done"
        ctx = replace(request("ctx", plan=Plan(max_tokens=32, preset="speedy")),
                      context=(ContextChunk("lib.py", "def helper(x):\n    return x * 2\n"),))
        assert (await collect(eng.submit(ctx)))[-1].kind in ("done", "error")
        assert (await collect(eng.submit(request("stop", plan=Plan(max_tokens=64, stop="line", preset="quality")))))[-1].reason == "stop_rule"
        old = eng.submit(request("old", doc="file:///s.py", plan=Plan(max_tokens=300, preset="quality")))
        assert (await first_draft(old)).kind == "draft"
        eng.submit(request("new", doc="file:///s.py", plan=Plan(max_tokens=8, preset="quality")))
        await collect(old)
        await b.wait_for(lambda: len([p for p, _ in b.bodies if p == "/abort_request"]) >= 2)
    finally:
        await eng.close()
        await a.stop()
        await b.stop()
    posts = a.bodies + b.bodies
    generates = [body for path, body in posts if path == "/generate"]
    aborts = [body for path, body in posts if path == "/abort_request"]
    assert len(generates) >= 7 and len(aborts) >= 2
    out = verdicts(posts, LLADA2_VOCAB)
    assert len(out) == len(posts)
    assert eng.builder is not None
    for (path, body), v in zip(posts, out, strict=True):
        assert v["ok"], (path, body, v)
        assert v["rid"] == body["rid"]
        if path == "/generate":
            assert v["is_single"] and v["stream"] is True
            assert v["max_new_tokens"] == body["sampling_params"]["max_new_tokens"]
            assert v["stop_token_ids"] == sorted(eng.builder.end_ids)
    assert {b["sampling_params"]["max_new_tokens"] for b in generates} >= {16, 64, 200, 300}


async def test_the_probe_refuses_what_sglang_refuses(wheel: Path) -> None:
    """The check can fail: bodies SGLang 0.5.23 refuses are refused, each at its own stage."""
    posts: list[tuple[str, Any]] = [
        ("/generate", {"rid": "r", "input_ids": [1], "stream": True, "sampling_params": {"threshold": 0.9}}),
        ("/generate", {"rid": "r", "input_ids": [1], "sampling_params": {"max_new_tokens": -1}}),
        ("/generate", {"rid": "r", "input_ids": [1], "sampling_params": {"top_p": 2.0}}),
        ("/generate", {"rid": "r", "sampling_params": {}}),
        ("/abort_request", {"rid": 5}),
    ]
    out = verdicts(posts, LLADA2_VOCAB)
    assert [v["ok"] for v in out] == [False] * 5
    assert out[0]["stage"] == "contract" and "unknown field `threshold`" in out[0]["error"]
    assert out[1]["stage"] == "sampling_params" and "max_new_tokens" in out[1]["error"]
    assert out[2]["stage"] == "sampling_params" and "top_p" in out[2]["error"]
    assert out[3]["stage"] == "normalize" and "input_ids" in out[3]["error"]
    assert out[4]["stage"] == "parse"
