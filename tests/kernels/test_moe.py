"""Routed-expert compute (kernels.moe_reference, kernels.moe_eager, kernels.moe) against a per-pair loop, on
irregular shapes: odd token counts, experts no token chose, top-k > 1, hidden sizes that are
not powers of two, experts with more pairs than a tile. The Triton kernel runs on the CPU
through ``TRITON_INTERPRET=1`` (set before ``kernels`` is imported); the LLaDA2 adapter's
stacked MoE layer must equal its old per-expert loop."""

from __future__ import annotations

import importlib
import os
from types import ModuleType
from typing import Any

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import kernels  # noqa: E402
from kernels.moe_eager import eager_moe  # noqa: E402
from kernels.moe_reference import reference_moe  # noqa: E402

try:
    _IMPL: ModuleType | None = importlib.import_module("kernels.moe")
except ImportError:
    _IMPL = None
INTERPRETED = bool(_IMPL is not None and _IMPL.INTERPRETED)
DEVICE = "cuda" if torch.cuda.is_available() and not INTERPRETED else "cpu"
needs_triton = pytest.mark.skipif(_IMPL is None or not (INTERPRETED or torch.cuda.is_available()),
                                  reason="Triton needs CUDA, or TRITON_INTERPRET=1 set before kernels is imported")

# (tokens, hidden, intermediate, experts, top-k): the last experts of each case get no token
SHAPES = [(7, 40, 24, 6, 3), (1, 24, 40, 5, 1), (13, 48, 20, 9, 4), (37, 36, 28, 3, 2)]
Case = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]


def make_case(n: int, d: int, inter: int, e: int, k: int, dtype: torch.dtype = torch.float32, seed: int = 0) -> Case:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g)
    w13 = torch.randn(e, 2 * inter, d, generator=g) / d ** 0.5
    w2 = torch.randn(e, d, inter, generator=g) / inter ** 0.5
    used = max(k, e - 2)  # experts used..e-1 are never chosen
    ids = torch.stack([torch.randperm(used, generator=g)[:k] for _ in range(n)]) if n else torch.zeros(0, k).long()
    w = torch.rand(n, k, generator=g)
    return tuple(t.to(DEVICE) for t in (x.to(dtype), w13.to(dtype), w2.to(dtype), ids, w))  # type: ignore[return-value]


def pair_loop(x: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor, ids: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """The definition, one (token, expert) pair at a time, in float64."""
    inter = w13.shape[1] // 2
    out = torch.zeros(x.shape, dtype=torch.float64)
    for n in range(x.shape[0]):
        for j in range(ids.shape[1]):
            e, xn = int(ids[n, j]), x[n].double().cpu()
            gu = w13[e].double().cpu() @ xn
            out[n] += float(w[n, j]) * (w2[e].double().cpu() @ (F.silu(gu[:inter]) * gu[inter:]))
    return out


@pytest.mark.parametrize("shape", SHAPES)
def test_reference_and_eager_match_the_pair_loop(shape: tuple[int, ...]) -> None:
    case = make_case(*shape)
    want = pair_loop(*case)
    for fn in (reference_moe, eager_moe):
        got = fn(*case)
        assert got.dtype == torch.float32 and got.shape == case[0].shape
        assert torch.allclose(got.double().cpu(), want, atol=1e-5), (fn.__name__, float((got.double().cpu() - want).abs().max()))


def test_eager_in_bf16_stays_near_the_spec() -> None:
    case = make_case(11, 40, 24, 6, 3, torch.bfloat16)
    ref, got = reference_moe(*case), eager_moe(*case)
    assert torch.allclose(got, ref, atol=3e-2, rtol=3e-2)
    assert float((got - pair_loop(*case).float()).abs().max()) > 0  # bf16 really rounds


def test_no_tokens_gives_an_empty_result() -> None:
    case = make_case(0, 24, 16, 4, 2)
    for fn in (reference_moe, eager_moe):
        assert fn(*case).shape == (0, 24)


@pytest.mark.skipif(_IMPL is None, reason="the tile schedule lives with the Triton kernel")
@pytest.mark.parametrize("block_m", [1, 2, 16])
def test_route_tiles_cover_every_pair_once_within_one_expert(block_m: int) -> None:
    assert _IMPL is not None
    _, _, _, ids, _ = make_case(37, 8, 8, 7, 3, seed=block_m)
    t = _IMPL.route_tiles(ids, 7, block_m)
    flat = ids.reshape(-1).cpu()
    assert t.expert.numel() == _IMPL.max_tiles(ids.numel(), 7, block_m)
    covered: list[int] = []
    for e, b, end in zip(t.expert.tolist(), t.begin.tolist(), t.end.tolist(), strict=True):
        if e < 0:
            assert b == end == 0
            continue
        pairs = t.order[b:end].long().cpu()
        assert 0 < end - b <= block_m and bool((flat[pairs] == e).all())
        covered += pairs.tolist()
    assert sorted(covered) == list(range(flat.numel()))


@needs_triton
@pytest.mark.parametrize("shape", SHAPES)
def test_triton_matches_the_spec(shape: tuple[int, ...]) -> None:
    assert _IMPL is not None
    case = make_case(*shape, seed=3)
    got = _IMPL.triton_moe(*case)
    assert torch.allclose(got.double().cpu(), pair_loop(*case), atol=1e-5)


@needs_triton
def test_triton_with_several_tiles_per_expert_and_k_steps() -> None:
    assert _IMPL is not None
    case = make_case(37, 40, 24, 3, 2, seed=5)  # ~25 pairs per expert: two 16-pair tiles
    got = _IMPL.triton_moe(*case, blocks=(16, 16, 16))  # 40 and 24 are cut into 16-wide steps
    assert torch.allclose(got.double().cpu(), pair_loop(*case), atol=1e-5)


def test_dispatch_names_a_backend_and_honours_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    x = torch.zeros(2, 4)
    monkeypatch.setenv("LLADA_KERNELS", "auto")
    assert kernels.moe_backend_name(x) == "eager"
    monkeypatch.setenv("LLADA_KERNELS", "reference")
    assert kernels.moe_backend_name(x) == "reference"
    assert kernels.moe_backend_name(x, "eager") == "eager"
    with pytest.raises(ValueError, match="expected one of auto, triton, eager, reference"):
        kernels.moe_backend_name(x, "grouped")  # the old MoE-only name is gone
    case = make_case(5, 24, 16, 4, 2)
    assert torch.allclose(kernels.moe_experts(*case), eager_moe(*case), atol=1e-6)


def test_bad_shapes_are_rejected() -> None:
    x, w13, w2, ids, w = make_case(3, 24, 16, 4, 2)
    with pytest.raises(ValueError):
        reference_moe(x, w13, w2[:, :, :8], ids, w)
    with pytest.raises(ValueError):
        eager_moe(x, w13, w2, ids[:, :1], w)


def tiny_moe(seed: int = 0, **config: Any) -> torch.nn.Module:
    """A LLaDA2 MoE layer (40 wide, 24 per expert) of random weights; `config` overrides
    LLaDA2Config's fields (12 experts, top-3, 2 of 4 groups unless said)."""
    from engine.model.adapters.llada2 import LLaDA2Config, SparseMoe

    torch.manual_seed(seed)
    c = LLaDA2Config(**{"hidden_size": 40, "moe_intermediate_size": 24, "num_experts": 12,
                        "num_experts_per_tok": 3, "n_group": 4, "topk_group": 2, **config})
    moe = SparseMoe(c)
    with torch.no_grad():
        for p in moe.parameters():
            p.normal_(0.0, 0.3)
        moe.gate.expert_bias.normal_(0.0, 0.1)
    return moe.eval()


@pytest.mark.parametrize("impl", ["auto", "eager", "reference", "triton"])
def test_stacked_moe_layer_equals_the_old_loop(impl: str) -> None:
    if impl == "triton" and not INTERPRETED:
        pytest.skip("the Triton path on CPU tensors needs TRITON_INTERPRET=1 before kernels is imported")
    moe = tiny_moe()
    x = torch.randn(3, 11, 40, generator=torch.Generator().manual_seed(1))  # 33 tokens, odd
    with torch.inference_mode():
        moe.impl = "loop"
        want = moe(x)
        moe.impl = impl
        got = moe(x)
    assert torch.allclose(got, want, atol=1e-5), float((got - want).abs().max())


def test_stacked_weights_keep_the_checkpoint_names_as_views() -> None:
    moe = tiny_moe()
    names = {n for n, _ in moe.named_parameters()}
    w13, w2 = moe.stack_experts()
    assert names == {n for n, _ in moe.named_parameters()}  # the loader's names, unchanged
    assert w13.shape == (12, 48, 40) and w2.shape == (12, 40, 24)
    e5 = moe.experts[5]
    assert e5.up_proj.weight.data_ptr() == w13[5, 24:].data_ptr() and e5.down_proj.weight.data_ptr() == w2[5].data_ptr()
    assert moe.stack_experts()[0] is w13  # stacked once
    moe.to(torch.float64)  # new parameter tensors: stacked again, from them
    w13b, _ = moe.stack_experts()
    assert w13b.dtype == torch.float64 and w13b is not w13


def test_set_moe_impl_rejects_unknown_names() -> None:
    from engine.model.adapters.llada2 import set_moe_impl

    moe = tiny_moe()
    set_moe_impl(moe, "loop")
    assert moe.impl == "loop"
    with pytest.raises(ValueError, match="moe impl"):
        set_moe_impl(moe, "dense")
