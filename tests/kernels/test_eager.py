"""The fast eager confidence path against the reference specification."""

from __future__ import annotations

import pytest
import torch

from kernels.eager import eager_confidence_tensors
from kernels.reference import reference_confidence_tensors

NEG_INF = float("-inf")


def check(logits: torch.Tensor, current: torch.Tensor | None, allowed: torch.Tensor | None = None) -> None:
    got = eager_confidence_tensors(logits, current, want_margin=True, allowed=allowed)
    want = reference_confidence_tensors(logits, current, want_margin=True, allowed=allowed)
    for name, g, w in zip(("top_id", "top_prob", "cur_prob", "margin"), got, want, strict=True):
        if w is None:
            assert g is None, name
            continue
        assert g is not None and g.dtype == w.dtype and g.shape == w.shape, name
        assert not torch.isnan(g).any(), name
        if name == "top_id":
            assert torch.equal(g, w), name
        else:
            torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6, msg=name)


def current_ids(n: int, v: int, seed: int) -> torch.Tensor:
    ids = torch.randint(0, v, (n,), generator=torch.Generator().manual_seed(seed))
    ids[::3] = -1  # no current token
    if n > 4:
        ids[4] = v  # out of range: probability 0
    return ids


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("n,v", [(1, 1000), (7, 4099), (33, 4096), (16, 157_184)])
def test_irregular_shapes(n: int, v: int, dtype: torch.dtype) -> None:
    logits = (torch.randn(n, v, generator=torch.Generator().manual_seed(n + v)) * 4).to(dtype)
    check(logits, current_ids(n, v, n), None)
    check(logits, None, None)


def test_ties_dead_rows_and_allowed() -> None:
    logits = torch.randn(6, 300, generator=torch.Generator().manual_seed(3))
    logits[0, [5, 9, 200]] = 50.0  # a three-way tie: lowest index, margin 0
    logits[1] = NEG_INF  # dead row: id 0, probabilities 0
    logits[2, :150] = NEG_INF
    allowed = torch.zeros(300, dtype=torch.bool)
    allowed[[9, 17, 200, 299]] = True
    check(logits, torch.tensor([9, 3, 160, -1, 299, 17]), None)
    check(logits, torch.tensor([9, 3, 160, -1, 299, 17]), allowed)
    top_id, top_prob, _, margin = eager_confidence_tensors(logits, None, want_margin=True)
    assert int(top_id[0]) == 5 and float(margin[0]) == 0.0  # type: ignore[index]
    assert int(top_id[1]) == 0 and float(top_prob[1]) == 0.0


def test_single_column_and_bad_arguments() -> None:
    check(torch.tensor([[0.3], [NEG_INF]]), torch.tensor([0, 0]))
    with pytest.raises(ValueError):
        eager_confidence_tensors(torch.zeros(2, 3, 4))
    with pytest.raises(TypeError):
        eager_confidence_tensors(torch.zeros(2, 3), allowed=torch.ones(3))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_chunks_leave_the_logits_unchanged_and_match_on_every_row(dtype: torch.dtype) -> None:
    """The one-pass path works a few rows at a time and shifts copies in place: rows in every
    chunk (and a last partial one) match the reference, and the caller's logits are untouched."""
    from kernels.eager import ROWS_PER_CHUNK

    n = 3 * ROWS_PER_CHUNK + 1
    logits = (torch.randn(n, 2048, generator=torch.Generator().manual_seed(11)) * 3).to(dtype)
    logits[ROWS_PER_CHUNK + 1] = NEG_INF  # a dead row inside a middle chunk
    before = logits.clone()
    check(logits, current_ids(n, 2048, 5), None)
    assert torch.equal(logits, before)
