"""Fused confidence kernel against its PyTorch reference, on irregular shapes.

Runs the Triton kernel on the CPU through ``TRITON_INTERPRET=1`` (set below, before
``kernels`` is imported; if another test imported ``kernels`` first without it, the
Triton cases skip with a reason). On a CUDA machine the same tests run compiled.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType
from typing import Any

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

import kernels  # noqa: E402
from kernels.reference import reference_confidence_tensors  # noqa: E402

try:  # the module itself: the package attribute ``kernels.confidence`` is the dispatch
    _IMPL: ModuleType | None = importlib.import_module("kernels.confidence")
except ImportError:  # Triton not installed: only the reference and dispatch tests run
    _IMPL = None

INTERPRETED = bool(_IMPL is not None and _IMPL.INTERPRETED)
HAS_CUDA = torch.cuda.is_available()
DEVICE = "cuda" if HAS_CUDA and not INTERPRETED else "cpu"
needs_triton = pytest.mark.skipif(
    _IMPL is None or not (INTERPRETED or HAS_CUDA),
    reason="Triton needs CUDA, or TRITON_INTERPRET=1 set before kernels is imported",
)
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
NEG_INF = float("-inf")


Result = tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor | None]


def triton_confidence_tensors(logits: torch.Tensor, *args: Any, **kw: Any) -> Result:
    assert _IMPL is not None
    return _IMPL.triton_confidence_tensors(logits, *args, **kw)


def pick_launch(*args: Any) -> tuple[int, int, int, int]:
    assert _IMPL is not None
    return _IMPL.pick_launch(*args)


def make_logits(n: int, v: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(n, v, generator=gen) * 4).to(dtype).to(DEVICE)


def make_current(n: int, v: int, seed: int) -> torch.Tensor:
    """Random current ids with a negative ("no token") id and an out-of-range id mixed in."""
    gen = torch.Generator().manual_seed(seed + 1)
    ids = torch.randint(0, v, (n,), generator=gen)
    ids[::3] = -1
    if n > 4:
        ids[4] = v  # out of range behaves like "no current token"
    return ids.to(DEVICE)


def assert_same(got: Result, want: Result) -> None:
    """Compare (top_id, top_prob, cur_prob, margin) tuples field by field."""
    names = ("top_id", "top_prob", "cur_prob", "margin")
    for name, g, w in zip(names, got, want, strict=True):
        if w is None:
            assert g is None, name
            continue
        assert g is not None, name
        assert g.shape == w.shape and g.dtype == w.dtype and g.device == w.device, name
        assert not torch.isnan(g).any(), name
        if name == "top_id":
            assert torch.equal(g, w), name
        else:
            torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6, msg=name)


def both(logits: torch.Tensor, current: torch.Tensor | None, **kw: Any) -> tuple[Result, Result]:
    allowed = kw.pop("allowed", None)
    want = reference_confidence_tensors(
        logits, current, want_margin=kw.get("want_margin", False), allowed=allowed
    )
    got = triton_confidence_tensors(logits, current, allowed=allowed, **kw)
    return got, want


# --- reference against a naive softmax (the spec checks itself) -----------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_reference_matches_naive_softmax(dtype: torch.dtype) -> None:
    logits = make_logits(9, 517, dtype, seed=1)
    current = torch.randint(0, 517, (9,), device=DEVICE)
    top_id, top_prob, cur_prob, margin = reference_confidence_tensors(
        logits, current, want_margin=True
    )
    probs = torch.softmax(logits.float(), dim=1)
    top2 = probs.topk(2, dim=1).values
    assert torch.equal(top_id, logits.float().argmax(dim=1))
    torch.testing.assert_close(top_prob, top2[:, 0])
    torch.testing.assert_close(cur_prob, probs.gather(1, current[:, None]).squeeze(1))
    torch.testing.assert_close(margin, top2[:, 0] - top2[:, 1])


def test_reference_special_rows() -> None:
    logits = torch.tensor(
        [[NEG_INF] * 4, [1.0, 3.0, 3.0, NEG_INF], [0.0, NEG_INF, NEG_INF, NEG_INF]]
    )
    top_id, top_prob, cur_prob, margin = reference_confidence_tensors(
        logits, torch.tensor([2, 3, -1]), want_margin=True
    )
    assert top_id.tolist() == [0, 1, 0]
    assert cur_prob is not None and margin is not None
    assert top_prob[0] == 0 and cur_prob[0] == 0 and margin[0] == 0
    assert margin[1] == 0 and cur_prob[1] == 0 and cur_prob[2] == 0
    torch.testing.assert_close(top_prob[2], torch.tensor(1.0))
    torch.testing.assert_close(margin[2], torch.tensor(1.0))


# --- Triton against the reference ------------------------------------------------------


@needs_triton
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [1, 7, 33])
@pytest.mark.parametrize("v", [1000, 4099])
def test_irregular_shapes(n: int, v: int, dtype: torch.dtype) -> None:
    logits = make_logits(n, v, dtype, seed=n * v)
    assert_same(*both(logits, make_current(n, v, seed=n), want_margin=True))
    assert_same(*both(logits, None))


@needs_triton
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_llada2_vocabulary(dtype: torch.dtype) -> None:
    n, v = 3, 157_184
    logits = make_logits(n, v, dtype, seed=7)
    logits[1, 100_000:] = NEG_INF  # a partly masked row
    assert_same(*both(logits, make_current(n, v, seed=7), want_margin=True))


@needs_triton
@pytest.mark.parametrize("block_v,n_chunks", [(128, 1), (256, 4), (512, 9), (1024, 100)])
def test_chunked_launches(block_v: int, n_chunks: int) -> None:
    n, v = 7, 4099
    logits = make_logits(n, v, torch.float16, seed=3)
    got, want = both(
        logits, make_current(n, v, seed=3), want_margin=True, block_v=block_v, n_chunks=n_chunks
    )
    assert_same(got, want)


@needs_triton
@pytest.mark.parametrize("block_v,n_chunks", [(None, None), (256, 4)])
def test_masked_rows_and_neg_inf(block_v: int | None, n_chunks: int | None) -> None:
    n, v = 6, 4099
    logits = make_logits(n, v, torch.float32, seed=5)
    logits[0] = NEG_INF  # fully masked row
    logits[2, :4000] = NEG_INF  # only the tail is alive (last, partial tile)
    logits[3, 1:] = NEG_INF  # only column 0 alive
    logits[4, ::2] = NEG_INF  # scattered -inf
    logits[5, : v - 1] = NEG_INF  # only the last column alive
    current = torch.tensor([5, 0, 4050, 0, 2, v - 1], device=DEVICE)
    got, want = both(logits, current, want_margin=True, block_v=block_v, n_chunks=n_chunks)
    assert_same(got, want)
    top_id, top_prob, cur_prob, margin = got
    assert cur_prob is not None and margin is not None
    assert top_id[0] == 0 and top_prob[0] == 0 and cur_prob[0] == 0 and margin[0] == 0
    assert top_id[3] == 0 and top_id[5] == v - 1
    torch.testing.assert_close(cur_prob[3], torch.tensor(1.0, device=DEVICE))
    assert cur_prob[4] == 0  # current token's logit is -inf


@needs_triton
@pytest.mark.parametrize("block_v,n_chunks", [(None, None), (256, 4), (128, 33)])
def test_ties_pick_lowest_index(block_v: int | None, n_chunks: int | None) -> None:
    n, v = 5, 4099
    logits = torch.zeros(n, v, device=DEVICE)
    # Equal maxima in the same lane of later tiles, in other lanes and in other chunks.
    for row, cols in enumerate([[5, 261, 300, 2000], [3000, 1025], [4098, 4097], [7, 7 + 512]]):
        logits[row, cols] = 9.0
    # Row 4 is all equal: every column ties.
    got, want = both(logits, None, want_margin=True, block_v=block_v, n_chunks=n_chunks)
    assert_same(got, want)
    assert got[0].tolist() == [5, 1025, 4097, 7, 0]
    margin = got[3]
    assert margin is not None and bool((margin == 0).all())  # margin of a tie is 0


@needs_triton
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_allowed_mask(dtype: torch.dtype) -> None:
    n, v = 7, 4099
    logits = make_logits(n, v, dtype, seed=11)
    gen = torch.Generator().manual_seed(11)
    allowed = (torch.rand(v, generator=gen) < 0.05).to(DEVICE)
    current = torch.randint(0, v, (n,), generator=gen).to(DEVICE)
    got, want = both(logits, current, want_margin=True, allowed=allowed, block_v=256, n_chunks=3)
    assert_same(got, want)
    assert bool(allowed[got[0]].all())
    assert got[2] is not None and torch.all(got[2][~allowed[current]] == 0)
    nothing = torch.zeros(v, dtype=torch.bool, device=DEVICE)
    top_id, top_prob, cur_prob, margin = triton_confidence_tensors(
        logits, current, want_margin=True, allowed=nothing
    )
    assert cur_prob is not None and torch.all(cur_prob == 0)
    assert torch.all(top_id == 0) and torch.all(top_prob == 0)


@needs_triton
def test_strided_rows_empty_and_single_column() -> None:
    wide = make_logits(7, 5000, torch.float16, seed=13)
    view = wide[:, 17 : 17 + 4099]  # rows are not contiguous with each other
    assert_same(*both(view, make_current(7, 4099, seed=13), want_margin=True))
    empty = torch.empty(0, 1000, device=DEVICE)
    got = triton_confidence_tensors(empty, torch.empty(0, dtype=torch.int64, device=DEVICE))
    assert got[0].shape == (0,) and got[2] is not None and got[3] is None
    one = make_logits(7, 1, torch.float32, seed=2)
    assert_same(*both(one, torch.zeros(7, dtype=torch.int64, device=DEVICE), want_margin=True))


@needs_triton
def test_pick_launch_covers_vocabulary() -> None:
    dev = torch.device("cpu")
    for n_rows, n_cols, elem in [(32, 157_184, 2), (2048, 126_464, 2), (1, 1000, 4)]:
        for chunks in (None, 1, 5, 1000):
            block, chunk_cols, n_chunks, _ = pick_launch(n_rows, n_cols, elem, dev, None, chunks)
            assert chunk_cols % block == 0
            assert (n_chunks - 1) * chunk_cols < n_cols <= n_chunks * chunk_cols


# --- argument checks and dispatch -------------------------------------------------------


def test_bad_arguments() -> None:
    with pytest.raises(ValueError):
        kernels.confidence(torch.zeros(2, 3, 4), backend="reference")
    with pytest.raises(TypeError):
        kernels.confidence(torch.zeros(2, 3, dtype=torch.int32), backend="reference")
    with pytest.raises(ValueError):
        kernels.confidence(torch.zeros(2, 3), torch.zeros(3, dtype=torch.int64), backend="reference")
    with pytest.raises(TypeError):
        kernels.confidence(torch.zeros(2, 3), allowed=torch.ones(3), backend="reference")


def test_dispatch_backend_selection(monkeypatch: pytest.MonkeyPatch) -> None:
    cpu = torch.zeros(2, 10)
    monkeypatch.delenv(kernels.ENV_VAR, raising=False)
    assert kernels.backend_name(cpu) == "eager"  # auto on CPU
    monkeypatch.setenv(kernels.ENV_VAR, "eager")
    assert kernels.backend_name(cpu) == "eager"
    monkeypatch.setenv(kernels.ENV_VAR, "reference")
    assert kernels.backend_name(cpu) == "reference"
    monkeypatch.setenv(kernels.ENV_VAR, "bogus")
    with pytest.raises(ValueError):
        kernels.backend_name(cpu)
    assert callable(kernels.confidence)  # not shadowed by the kernels.confidence module


@needs_triton
@pytest.mark.parametrize("backend", ["reference", "eager", "triton", "auto"])
def test_dispatch_forced(monkeypatch: pytest.MonkeyPatch, backend: str) -> None:
    monkeypatch.setenv(kernels.ENV_VAR, backend)
    logits = make_logits(7, 1000, torch.bfloat16, seed=17)
    current = make_current(7, 1000, seed=17)
    auto = "triton" if logits.is_cuda else "eager"
    expected = auto if backend == "auto" else backend
    assert kernels.backend_name(logits) == expected
    out = kernels.confidence(logits, current, want_margin=True)
    assert isinstance(out, kernels.Confidence)
    ref = kernels.confidence(logits, current, want_margin=True, backend="reference")
    assert_same(
        (out.top_id, out.top_prob, out.cur_prob, out.margin),
        (ref.top_id, ref.top_prob, ref.cur_prob, ref.margin),
    )
    bare = kernels.confidence(logits)
    assert bare.cur_prob is None and bare.margin is None
