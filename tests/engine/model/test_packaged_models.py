"""The packaged checkpoints: each resolves by name, loads with the project's loader and with
`transformers.AutoModel.from_pretrained`, fits the 40 MB budget, and completes code."""

from __future__ import annotations

import pytest
import torch

from engine.model.loader import load_model
from engine.model.model_path import CHECKPOINTS_DIR, resolve
from engine.model.native import CLEAN, PRESETS, layout_mask

PACKAGED = sorted(p.name for p in CHECKPOINTS_DIR.iterdir() if (p / "config.json").exists())


def test_both_models_are_packaged() -> None:
    assert {"tiny-code", "mini-code"} <= set(PACKAGED)


@pytest.mark.parametrize("name", PACKAGED)
def test_packaged_model_loads_both_ways_and_fits_the_budget(name: str) -> None:
    path = resolve(name)
    assert path == CHECKPOINTS_DIR / name
    size = sum(f.stat().st_size for f in path.iterdir())
    assert size <= 40 * 10**6, f"{name}: {size / 1e6:.1f} MB"
    m = load_model(name).model
    want = PRESETS[name]
    assert (m.config.n_layer, m.config.dim, m.config.n_head) == (want.n_layer, want.dim, want.n_head)
    assert all(p.dtype == torch.float32 for p in m.parameters())  # bfloat16 on disk is widened
    from transformers import AutoModel

    from engine.model.hf import register

    register()
    hf = AutoModel.from_pretrained(path, dtype=torch.float32)  # the stored dtype (bf16) otherwise
    x = torch.randint(8, m.config.vocab_size, (1, 12), generator=torch.Generator().manual_seed(0))
    pos = torch.arange(12)[None]
    k, b = torch.full_like(x, CLEAN), torch.full_like(x, -1)
    with torch.no_grad():
        ref = m(x, pos, layout_mask(k, pos, b, k, pos, b))
        assert bool(torch.isfinite(ref).all())
        # the same function in float32, not the same bits: the loader lays the weights out as the
        # CPU's GEMM reads them (engine.model.checkpoint.cpu_gemm_layout), so sums run in another
        # order (up to ~2e-5 apart on logits of ~5 over 30 inputs); one wrong matrix moves them 5-8
        assert torch.allclose(hf(x), ref, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("prefix", [
    "import os\n\n\ndef read(path):\n    with open(path) as f:\n        return f.",
    "class Point:\n    def __init__(self, x, y):\n        self.x = x\n        self.",
])
def test_the_larger_model_completes_a_line_into_valid_code(prefix: str) -> None:
    from engine.api import CompletionRequest, Plan
    from engine.service import TextEngine

    eng = TextEngine("mini-code", threads=2)
    events = list(eng.complete(CompletionRequest("r", "k", prefix, "\n", Plan(max_tokens=16, stop="line"))))
    text = events[-1].text
    assert events[-1].kind == "done" and text.strip(), events[-1]
    compile(prefix + text + "\n", "<completion>", "exec")  # raises SyntaxError if the line is broken


def test_llada_model_may_name_a_packaged_checkpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLADA_MODEL", "mini-code")
    assert resolve(None) == resolve("embedded") == CHECKPOINTS_DIR / "mini-code"
    monkeypatch.delenv("LLADA_MODEL")
    assert resolve(None) == CHECKPOINTS_DIR / "tiny-code"
