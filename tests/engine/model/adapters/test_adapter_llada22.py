"""LLaDA2.2 in the LLaDA2 adapter: block routing read from the config matches an independent
reference forward (tests/engine/model/adapters/reference_models.py) at <= 1e-4 in float32, moves the
logits (it is not token routing under another name), keeps the KV cache exact, and configs
the adapter cannot read are refused with a message naming the key."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from engine.decoding.batch import execute, new_slot_attrs
from engine.decoding.decode_bidir import make_sequence
from engine.decoding.policies import make_policy
from engine.model.adapters.llada2 import SparseMoe
from engine.model.loader import LoadedModel, load_model
from kernels.moe_reference import route_groups
from tests.engine.model.adapters.reference_models import (
    block_causal,
    llada2_logits,
    load_checkpoint,
)
from tests.engine.model.adapters.tiny_ckpts import MASK, prompt_ids, write_llada2
from tests.engine.model.adapters.tiny_llada22 import (
    CAPACITY,
    DELETE,
    ROUTING_BLOCK,
    SPLIT,
    set_config,
    write_llada22,
)

TOL = 1e-4
MAX_LEN = 320


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_llada22(tmp_path_factory.mktemp("llada22"))


@pytest.fixture(scope="module")
def lm(ckpt: Path) -> LoadedModel:
    m = load_model(ckpt, dtype=torch.float32)
    m.model.setup_cache(1, MAX_LEN)
    return m


def uncached(model: torch.nn.Module, ids: list[int]) -> torch.Tensor:
    n = len(ids)
    with torch.no_grad():
        return model(torch.tensor([ids]), torch.arange(n)[None], block_causal(n, ROUTING_BLOCK)[None, None])[0]


def test_loads_with_block_routing_and_edit_tokens(lm: LoadedModel) -> None:
    args = lm.model.args
    assert lm.family == "llada2" and args.block_routing and args.expert_capacity == CAPACITY
    assert lm.model.edit_tokens == (DELETE, SPLIT) and lm.config.special.mask == MASK
    assert lm.config.block_size == ROUTING_BLOCK and args.max_position_embeddings == 131072


@pytest.mark.parametrize("n", [32, 75])  # whole blocks; two and a partial one
def test_logits_match_the_reference_forward(lm: LoadedModel, ckpt: Path, n: int) -> None:
    cfg, state = load_checkpoint(ckpt)
    ids = prompt_ids(n, seed=n)
    want = llada2_logits(cfg, state, ids, block_causal(n, ROUTING_BLOCK))
    got = uncached(lm.model, ids)
    assert float((got - want).abs().max()) <= TOL


def test_block_routing_moves_the_logits(lm: LoadedModel, ckpt: Path, tmp_path: Path) -> None:
    """Capacity 48 of 256 changes the logits against the full pool and against LLaDA2.1's
    group-limited token routing; and a token's logits depend on its block-mates' routing."""
    ids = prompt_ids(64, seed=3)
    base = uncached(lm.model, ids)
    for keys in ({"expert_capacity": 256}, {"expert_capacity": None, "block_size": None}):
        other = tmp_path / str(len(list(tmp_path.iterdir())))
        shutil.copytree(ckpt, other)
        got = uncached(load_model(set_config(other, **keys), dtype=torch.float32).model, ids)
        assert float((got - base).abs().max()) > 1e-2, keys
    # the MoE of layer 1 alone: the same token routed with other block-mates gets other experts
    moe = lm.model.model.layers[1].mlp
    assert isinstance(moe, SparseMoe)
    h = torch.randn(ROUTING_BLOCK, lm.config.dim, generator=torch.Generator().manual_seed(1))
    alone, _ = moe.gate(h[:1], torch.zeros(1, dtype=torch.long))
    together, _ = moe.gate(h, torch.zeros(ROUTING_BLOCK, dtype=torch.long))
    pool = {int(e) for e in together.flatten()}
    assert len(pool) <= CAPACITY
    assert set(alone[0].tolist()) != set(together[0].tolist())


def test_route_groups_split_runs_blocks_and_padding() -> None:
    pos = torch.tensor([[30, 31, 32, 33, 32, 33, 0, 0], [0, 1, 2, 3, 4, 5, 6, 7]])
    g = route_groups(pos, 32).tolist()
    # row 0: [30 31] [32 33] (clean) [32 33] (noisy copy) [0] [0] (padding); row 1: one run
    assert g == [0, 0, 1, 1, 2, 2, 3, 4, 5, 5, 5, 5, 5, 5, 5, 5]


@pytest.mark.parametrize("prompt_len", [21, 40])
def test_cached_block_routed_decoding_equals_uncached(lm: LoadedModel, prompt_len: int) -> None:
    """Every step's cached logits equal the uncached window's: the fed blocks are the routing
    blocks, so a cached block was routed with exactly its final tokens."""
    m, prompt = lm.model, prompt_ids(prompt_len, seed=prompt_len)
    seq = make_sequence(m, prompt, make_policy("speedy"), 40, max_len=MAX_LEN)
    attrs = new_slot_attrs(MAX_LEN, 0)
    steps = 0
    while not seq.done():
        feed, blk = seq.prepare(), seq._block()
        window = [*prompt, *seq.middle.tolist()][: seq._feed_start() + ROUTING_BLOCK]
        want = uncached(m, window)[seq.P + blk.start: seq.P + blk.stop]
        (got,) = execute(m, [seq], [feed], [attrs])
        assert float((got - want).abs().max()) <= TOL
        seq.update(got)
        steps += 1
    assert steps > 2


def test_llada21_checkpoint_is_unchanged(tmp_path: Path) -> None:
    """A 2.1 checkpoint has no block routing and no edit tokens: group-limited token routing,
    whatever the window, as before."""
    lm21 = load_model(write_llada2(tmp_path / "llada21"), dtype=torch.float32)
    assert not lm21.model.args.block_routing and lm21.model.edit_tokens is None
    assert lm21.model.route_groups(torch.arange(8)[None]) is None
    cfg, state = load_checkpoint(tmp_path / "llada21")
    ids = prompt_ids(19, seed=2)
    want = llada2_logits(cfg, state, ids, block_causal(19, 32))
    assert float((uncached(lm21.model, ids) - want).abs().max()) <= TOL


@pytest.mark.parametrize(("keys", "message"), [
    ({"expert_capacity": 300}, "expert_capacity 300"),
    ({"expert_capacity": 4}, "expert_capacity 4"),
    ({"expert_capacity": "48"}, "expert_capacity '48'"),
    ({"block_size": None}, "without block_size"),
    ({"score_function": "softmax"}, "score_function 'softmax'"),
    ({"split_token_id": None}, "delete_token_id without its pair"),
    ({"delete_token_id": 96}, "delete_token_id 96"),
    ({"split_token_id": DELETE}, "the same id"),
])
def test_unreadable_llada22_configs_are_refused(ckpt: Path, tmp_path: Path, keys: dict, message: str) -> None:
    bad = tmp_path / "bad"
    shutil.copytree(ckpt, bad)
    set_config(bad, **keys)
    with pytest.raises(ValueError, match=message):
        load_model(bad, dtype=torch.float32)
    assert json.loads((ckpt / "config.json").read_text())["expert_capacity"] == CAPACITY  # nothing lost


def test_a_block_routed_config_without_edit_ids_loads_and_warns(ckpt: Path, tmp_path: Path,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    """SGLang keeps a fallback table for LLaDA2.2-flash, whose config may not name the edit ids:
    such a config loads (block routing on, no in/del) and says what to add."""
    bare = tmp_path / "bare"
    shutil.copytree(ckpt, bare)
    with caplog.at_level("WARNING"):
        m = load_model(set_config(bare, delete_token_id=None, split_token_id=None), dtype=torch.float32)
    assert m.model.args.block_routing and m.model.edit_tokens is None
    assert "delete_token_id" in caplog.text
