from __future__ import annotations

import pytest
import torch

from engine.model import ModelConfig, Transformer, preset


@pytest.fixture(scope="module")
def tiny() -> Transformer:
    """A tiny random block-causal model (test-tiny preset, block 4, shifted logits)."""
    torch.manual_seed(0)
    m = Transformer(preset("test-tiny", max_seq_len=512))
    m.init_weights(0)
    # sharpen the random model so that confidences spread over (0, 1)
    with torch.no_grad():
        m.tok_embeddings.weight.mul_(40.0)
    m.eval()
    m.setup_cache(2, 512)
    return m


@pytest.fixture
def cfg(tiny: Transformer) -> ModelConfig:
    return tiny.config


def prompt_of(cfg: ModelConfig, prefix: list[int], suffix: list[int]) -> list[int]:
    sp = cfg.special
    return [sp.fim_suffix, *suffix, sp.fim_prefix, *prefix, sp.fim_middle]
