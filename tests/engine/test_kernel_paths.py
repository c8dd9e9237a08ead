"""The engine produces the same tokens through every kernel path: reference, eager, Triton."""

from __future__ import annotations

import importlib

import pytest

from engine.model import Transformer
from tests.engine.test_decode import run


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
        seq, _ = run(tiny, "speedy", max_new=8)
        results[backend] = (seq.final_middle(), seq.forwards)
    for backend in backends[1:]:
        assert results[backend] == results["reference"], backend
