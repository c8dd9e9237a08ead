"""The engine produces the same tokens through every kernel path: reference, eager, Triton,
chosen by the one variable `LLADA_KERNELS` (kernels.dispatch) for every kernel alike."""

from __future__ import annotations

import importlib

import pytest
import torch

import kernels
from engine.model.native import Transformer
from tests.engine.decoding.test_decode import run


def test_same_tokens_with_every_kernel_path(tiny: Transformer, monkeypatch: pytest.MonkeyPatch) -> None:
    backends = ["reference", "eager"]
    try:
        triton_module = importlib.import_module("kernels.confidence")
    except ImportError:
        triton_module = None
    if triton_module is not None and triton_module.INTERPRETED:
        backends.append("triton")  # the model is on the CPU: Triton runs interpreted (./dev test)
    results = {}
    for backend in backends:
        monkeypatch.setenv("LLADA_KERNELS", backend)
        # one value names the same implementation of every kernel (the MoE layers' too)
        assert kernels.backend_name(torch.zeros(2, 8)) == kernels.moe_backend_name(torch.zeros(2, 8)) == backend
        seq, _ = run(tiny, "speedy", max_new=8)
        results[backend] = (seq.final_middle(), seq.forwards)
    for backend in backends[1:]:
        assert results[backend] == results["reference"], backend


@pytest.mark.parametrize("one_call", [True, False])
def test_step_confidences_match_per_sequence_calls_and_isolate_a_broken_row(one_call: bool) -> None:
    """`engine.decoding.batch.confidences` over ragged sequences (one call for the step, as on an
    accelerator, or one a sequence, as on the CPU) equals each sequence's own call; a sequence
    whose current ids do not match its rows gets an exception and the others their values."""
    from engine.decoding.batch import confidences
    from engine.decoding.decode import Staged
    from kernels import confidence

    g = torch.Generator().manual_seed(3)
    staged = [Staged(torch.randn(n, 37, generator=g) * 4, torch.randint(-1, 37, (n,), generator=g),
                     slice(0, n), False, False) for n in (5, 16, 1, 9)]
    got = confidences(staged, one_call=one_call)
    for st, conf in zip(staged, got, strict=True):
        want = confidence(st.logits, st.current)
        assert not isinstance(conf, Exception)
        assert torch.equal(conf.top_id, want.top_id)
        assert torch.allclose(conf.top_prob, want.top_prob) and torch.allclose(conf.cur_prob, want.cur_prob)
    broken = Staged(staged[1].logits, staged[1].current[:-2], slice(0, 16), False, False)
    got = confidences([staged[0], broken, staged[2]], one_call=one_call)
    assert isinstance(got[1], Exception)
    assert not isinstance(got[0], Exception) and torch.equal(got[0].top_id, confidence(staged[0].logits).top_id)
    assert not isinstance(got[2], Exception)
