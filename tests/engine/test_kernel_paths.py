"""The engine produces the same tokens through the reference and the Triton kernel paths."""

from __future__ import annotations

import os

import pytest

from engine.model import Transformer
from tests.engine.test_decode import run


def test_same_tokens_with_either_kernel_path(tiny: Transformer, monkeypatch: pytest.MonkeyPatch) -> None:
    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("TRITON_INTERPRET=1 must be set before kernels is imported (./dev test sets it)")
    pytest.importorskip("triton")
    results = {}
    for backend in ("reference", "triton"):
        monkeypatch.setenv("LLADA_KERNELS", backend)
        seq, _ = run(tiny, "speedy", max_new=8)
        results[backend] = (seq.final_middle(), seq.forwards)
    assert results["reference"] == results["triton"]
