"""LLaDA2.2's block routing on every MoE path: the routing (kernels.moe_reference.block_allowed)
keeps each block's tokens inside its `expert_capacity` experts, and the reference, eager
(grouped GEMMs) and Triton expert compute (interpreted on the CPU) give the per-expert loop's output
on block-routed ids. Block routing reads fewer experts per block than token routing."""

from __future__ import annotations

import importlib
import os
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

from kernels.moe_reference import block_allowed, experts_read, route_groups  # noqa: E402
from tests.kernels.test_moe import tiny_moe  # noqa: E402

try:
    INTERPRETED = bool(importlib.import_module("kernels.moe").INTERPRETED)
except ImportError:
    INTERPRETED = False

E, K, CAP, BLOCK = 64, 4, 12, 8


def block_moe(capacity: int | None) -> torch.nn.Module:
    return tiny_moe(0, num_experts=E, num_experts_per_tok=K, expert_capacity=capacity, block_size=BLOCK,
                    n_group=8, topk_group=4)  # LLaDA2Config's own group limit


def test_block_allowed_keeps_each_group_inside_its_capacity() -> None:
    g = torch.Generator().manual_seed(2)
    choice = torch.rand(20, E, generator=g)
    groups = route_groups(torch.tensor([list(range(8, 28))]), BLOCK)  # blocks [8,16) [16,24) [24,28)
    allowed = block_allowed(choice, groups, CAP)
    assert allowed.sum(-1).eq(CAP).all()
    for gid in groups.unique():
        rows = allowed[groups == gid]
        assert (rows == rows[0]).all()  # one pool a block
        best = choice[groups == gid].max(0).values
        assert set(rows[0].nonzero().flatten().tolist()) == set(best.topk(CAP).indices.tolist())


@pytest.mark.parametrize("impl", ["eager", "reference", "triton"])
def test_every_expert_path_gives_the_loop_on_block_routed_ids(impl: str) -> None:
    if impl == "triton" and not INTERPRETED:
        pytest.skip("the Triton path on CPU tensors needs TRITON_INTERPRET=1 before kernels is imported")
    moe = block_moe(CAP)
    x = torch.randn(1, 21, 40, generator=torch.Generator().manual_seed(1))
    groups = route_groups(torch.arange(3, 24)[None], BLOCK)
    with torch.inference_mode():
        moe.impl = "loop"
        want = moe(x, groups)
        moe.impl = impl
        got = moe(x, groups)
    assert torch.allclose(got, want, atol=1e-5), float((got - want).abs().max())


def test_block_routing_reads_at_most_capacity_experts_a_block() -> None:
    h = torch.randn(64, 40, generator=torch.Generator().manual_seed(4))
    groups = route_groups(torch.arange(64)[None], BLOCK)
    ids_block, _ = block_moe(CAP).gate(h, groups)
    ids_token, _ = block_moe(None).gate(h)
    per_block = experts_read(ids_block, groups, E)
    assert int(per_block.max()) <= CAP
    assert float(per_block.float().mean()) < float(experts_read(ids_token, groups, E).float().mean())


@pytest.mark.parametrize("impl", ["eager", "reference", "triton"])
def test_the_llada22_fixture_matches_its_reference_forward_on_every_path(impl: str, tmp_path: Path) -> None:
    """The whole tiny LLaDA2.2 model (block routing on) on each expert path against the
    independent reference forward of tests/engine/model/adapters/reference_models.py, float32, <= 1e-4."""
    if impl == "triton" and not INTERPRETED:
        pytest.skip("the Triton path on CPU tensors needs TRITON_INTERPRET=1 before kernels is imported")
    from engine.model.adapters.llada2 import set_moe_impl
    from engine.model.loader import load_model
    from tests.engine.model.adapters.reference_models import (
        block_causal,
        llada2_logits,
        load_checkpoint,
    )
    from tests.engine.model.adapters.tiny_ckpts import prompt_ids
    from tests.engine.model.adapters.tiny_llada22 import write_llada22

    ckpt = write_llada22(tmp_path / "llada22")
    m = load_model(ckpt, dtype=torch.float32).model
    set_moe_impl(m, impl)
    ids = prompt_ids(40, seed=1)
    cfg, state = load_checkpoint(ckpt)
    want = llada2_logits(cfg, state, ids, block_causal(40, 32))
    with torch.inference_mode():
        got = m(torch.tensor([ids]), torch.arange(40)[None], block_causal(40, 32)[None, None])[0]
    assert float((got - want).abs().max()) <= 1e-4


def test_ties_at_the_capacity_cut_and_in_the_token_top_k_go_to_the_lower_expert_id() -> None:
    """SGLang 0.5.23's rule (docs/models.md, "LLaDA2.2"): tied block scores at the capacity cut
    keep the lower ids, and a token's top-k takes the lower of tied experts. torch.topk picks
    tied entries in no promised order (on this CPU: high ids first)."""
    bias = torch.zeros(E)
    bias[40:48] = 0.5  # 8 experts clearly in every block's pool
    bias[[7, 3, 30, 21, 60, 12]] = 0.25  # 6 tied for the 4 places left (CAP 12): 3, 7, 12, 21
    choice = torch.sigmoid(torch.zeros(16, E)) + bias  # every token scores every expert alike
    groups = route_groups(torch.arange(16)[None], BLOCK)
    allowed = block_allowed(choice, groups, CAP)
    assert allowed.nonzero()[:, 1].view(16, CAP)[0].tolist() == [3, 7, 12, 21, *range(40, 48)]
    moe = block_moe(CAP)
    with torch.no_grad():
        moe.gate.weight.zero_()
        moe.gate.expert_bias.copy_(bias)
        moe.gate.expert_bias[40:48] = 0.25  # now all 12 of the pool tie for each token's top-4
    ids, _ = moe.gate(torch.randn(16, 40), groups)
    assert sorted(ids[0].tolist()) == [3, 7, 12, 21] and (ids == ids[0]).all()


def test_the_reference_forward_breaks_routing_ties_as_the_adapter_does() -> None:
    """The tests' reference MoE (reference_models.llada22_moe) on the tied gate above gives the
    adapter's output: both take the lower ids."""
    from tests.engine.model.adapters.reference_models import llada22_moe

    moe = block_moe(CAP)
    with torch.no_grad():
        moe.gate.weight.zero_()
        moe.gate.expert_bias.zero_()
        moe.gate.expert_bias[[7, 3, 30, 21, 60, 12, 50]] = 0.25
    x = torch.randn(1, 16, 40, generator=torch.Generator().manual_seed(3))
    cfg = {"block_size": BLOCK, "expert_capacity": CAP, "num_experts_per_tok": K,
           "routed_scaling_factor": moe.gate.c.routed_scaling_factor, "num_shared_experts": moe.gate.c.num_shared_experts}
    state = {k: v.detach() for k, v in moe.state_dict().items()}
    with torch.inference_mode():
        moe.impl = "loop"
        got = moe(x, route_groups(torch.arange(16)[None], BLOCK))[0]
    want = llada22_moe(x[0], state, "", cfg)
    assert float((got - want).abs().max()) <= 1e-5
