from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
import torch

from engine.decoding.batch import execute, new_slot_attrs
from engine.decoding.decode import Sequence, TokenEvent
from engine.model.native import ModelConfig, Transformer, preset


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


def decode_alone(model: torch.nn.Module, seq: Sequence, on_prefilled: Callable[[Sequence], None] | None = None,
                 max_len: int | None = None) -> list[TokenEvent]:
    """`steps_alone` to the end: every token event, done last."""
    return list(steps_alone(model, seq, on_prefilled, max_len))


def steps_alone(model: torch.nn.Module, seq: Sequence, on_prefilled: Callable[[Sequence], None] | None = None,
                max_len: int | None = None) -> Iterator[TokenEvent]:
    """One hand-built `Sequence` stepped on its own cache row, for the decoder's contracts
    (its policy, stop, end, remask and layout rules); yields each step's token event, then done.
    Not the engine's loop: requests are decoded by `engine.decoding.scheduler.Scheduler` (tests/engine/daemon,
    tests/engine/decoding/test_alternatives.py); this is its per-step body (prepare, `batch.execute`,
    `Sequence.update`) with nothing else around it. `max_len`: the slot layout's length for a
    model without a KV cache."""
    attrs = new_slot_attrs(max_len or model.cache_len, seq.clean_len)  # type: ignore[arg-type]
    while not seq.done():
        (logits,) = execute(model, [seq], [seq.prepare()], [attrs])  # type: ignore[arg-type]
        first = seq.forwards == 0
        ev = seq.update(logits)
        if first and on_prefilled is not None:
            on_prefilled(seq)
        yield ev
    yield seq.finish_event()
