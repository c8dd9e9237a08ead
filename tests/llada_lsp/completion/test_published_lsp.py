"""Each published diffusion coder, as a tiny checkpoint built from its published config (padded
vocabulary, real special ids, chat template; tests/fakes/real_ckpts.py), completes mid-word
through the real language server over stdio with the fixture as `model` (issue 52)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from lsprotocol import types as t

from engine.model.loader import cpu_has_bf16_matmul
from tests.fakes.real_ckpts import fixture
from tests.llada_lsp.lsp_helpers import debug_info, inline, item_texts, open_doc, server_session

PUBLISHED = ["dream-instruct", "dream-coder-instruct", "diffucoder-instruct", "llada-1.5", "llada2-mini",
             "llada2.2-mini", "llada-moe-instruct"]
TEXT = "def f(x):\n    ret"
HEADS = ("lm_head.weight", "model.transformer.ff_out.weight")  # the output projections of the families
SHARPEN = 100.0


def sharpened(name: str, into: Path) -> Path:
    """A copy of the fixture whose output head is SHARPEN x larger: the random model is confident
    and commits several tokens a forward instead of one (the same shapes, vocabulary and files)."""
    from safetensors.torch import load_file, save_file

    shutil.copytree(fixture(name), into)
    weight_map = json.loads((into / "model.safetensors.index.json").read_text())["weight_map"]
    head = next(k for k in HEADS if k in weight_map)
    shard = into / weight_map[head]
    tensors = load_file(shard)
    tensors[head] = tensors[head] * SHARPEN
    save_file(tensors, str(shard), metadata={"format": "pt"})
    return into


@pytest.mark.asyncio(loop_scope="function")
@pytest.mark.parametrize("name", PUBLISHED)
async def test_a_published_checkpoint_completes_mid_word_through_the_server(name: str, tmp_path: Path) -> None:
    init = {"model": str(sharpened(name, tmp_path / name)), "maxPromptTokens": 700, "speculative": False, "syntaxCheck": False,
            "rescueAlternatives": 0, "maxTokens": {"line": 8, "statements": 8, "block": 8},
            "engineFirstEventMs": 120_000, "engineTimeoutMs": 600_000}  # a busy 2-core machine
    async with server_session(init) as client:
        info = (await debug_info(client))["engineInfo"]
        # dtype auto: the stored bf16, computed in float32 on a CPU without bf16 matrix units (a tiny fixture fits)
        assert info["prompt_format"] == "chat" and info["dtype"] == ("bfloat16" if cpu_has_bf16_matmul() else "float32")
        uri = open_doc(client, tmp_path / "f.py", "python", text=TEXT)
        res = await inline(client, uri, t.Position(1, 7), invoked=True)
        after = await debug_info(client)
        assert after["engineState"] == "ready" and after["engine"]["engine_calls"] >= 1
        texts = item_texts(res)
        assert "engine error" not in (after.get("lastEmptyReason") or ""), after.get("lastEmptyReason")
        # token healing backed off "ret": whatever the random weights write continues the word
        assert all(tx.startswith("urn") or not tx[:1].isalnum() for tx in texts)
