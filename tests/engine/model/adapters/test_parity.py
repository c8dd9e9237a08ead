"""Parity of the native adapters with the published models.

Each family's adapter is compared, in float32, with an independent reference forward written
from the published modeling code (`reference_models`), on tiny random checkpoints whose
configs turn on the options a misreading would hide behind: group-limited routing over
several groups, expert bias, shared experts, dense first layers, partial rotary, QK norm,
q/k/v biases, grouped-query attention, tied heads, a wide embedding, scaled logits. A
sensitivity test shows that dropping any one of those options moves the reference's logits
far beyond the tolerance, so a parity pass is not vacuous. For LLaDA2, the cached engine
decodes token for token as the published (uncached) `generate()` does, with LLaDA2.0's
threshold rule and with LLaDA2.1's token edits.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from torch import Tensor

from engine.decoding.decode import Sequence
from engine.decoding.policies import Policy, make_policy
from engine.model.loader import LoadedModel, load_model
from tests.engine.conftest import steps_alone
from tests.engine.model.adapters import reference_models as ref
from tests.engine.model.adapters.tiny_ckpts import (
    MASK,
    VOCAB,
    never_predict_mask,
    prompt_ids,
    write_dream,
    write_dream_variant,
    write_llada,
    write_llada2,
    write_llada2_variant,
    write_llada_variant,
)

ATOL = 1e-4  # float32; the two sides differ only in summation order
BLOCK, MAX_LEN = 8, 256
Writer = Callable[[Path], Path]
Built = tuple[LoadedModel, ref.Config, ref.State]


def build(tmp: pytest.TempPathFactory, writer: Writer) -> Built:
    path = writer(tmp.mktemp(getattr(writer, "__name__", "ckpt")))
    cfg, state = ref.load_checkpoint(path)
    return load_model(path, dtype=torch.float32), cfg, state


def adapter_logits(lm: LoadedModel, ids: list[int], allowed: Tensor | None) -> Tensor:
    n = len(ids)
    mask = None if allowed is None else allowed[None, None]
    with torch.no_grad():
        return lm.model(torch.tensor([ids]), torch.arange(n)[None], mask)[0]


def max_diff(a: Tensor, b: Tensor) -> float:
    assert a.shape == b.shape, (a.shape, b.shape)
    return float((a - b).abs().max())


@pytest.fixture(scope="module", params=[write_llada2, write_llada2_variant])
def llada2(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Built:
    return build(tmp_path_factory, request.param)


@pytest.fixture(scope="module", params=[write_llada2, write_llada2_variant])
def llada2_decoding(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Built:
    """The same checkpoints, never predicting [MASK] (see tiny_ckpts.never_predict_mask)."""
    writer: Writer = request.param
    return build(tmp_path_factory, lambda out: never_predict_mask(writer(out)))


@pytest.mark.parametrize("n", [21, 24])  # a partial last block, and none
def test_llada2_logits_match_the_published_forward(llada2: Built, n: int) -> None:
    lm, cfg, state = llada2
    ids = prompt_ids(n, seed=n)
    ids[5], ids[n - 2] = MASK, MASK  # the mask token embeds like any other
    allowed = ref.block_causal(n, BLOCK)
    want = ref.llada2_logits(cfg, state, ids, allowed)
    assert max_diff(adapter_logits(lm, ids, allowed), want) <= ATOL


@pytest.mark.parametrize(("writer", "reference", "seed"), [
    (write_llada, ref.llada_logits, 7), (write_llada_variant, ref.llada_logits, 7),
    (write_dream, ref.dream_logits, 8), (write_dream_variant, ref.dream_logits, 8),
])
def test_llada_and_dream_logits_match_the_published_forward(tmp_path_factory: pytest.TempPathFactory, writer: Writer,
                                                            reference: Callable[..., Tensor], seed: int) -> None:
    lm, cfg, state = build(tmp_path_factory, writer)
    ids = prompt_ids(19, seed=seed)
    want = reference(cfg, state, ids)
    assert want.shape[-1] == cfg.get("embedding_size", cfg["vocab_size"])  # LLaDA's rows: the padded embedding
    # Dream's raw rows compared here are the AR-convention logits
    assert lm.config.shift_logits == (reference is ref.dream_logits)
    assert max_diff(adapter_logits(lm, ids, None), want) <= ATOL


def interleaved_rotate(x: Tensor) -> Tensor:
    """The GPT-J pairing (x0, x1) -> (-x1, x0): the layout LLaDA2, LLaDA and Dream do not use."""
    return torch.stack([-x[..., 1::2], x[..., 0::2]], dim=-1).flatten(-2)


LLADA2_OPTIONS: dict[str, ref.Config] = {
    "no group limit": {"topk_group": 10**6},
    "full rotary": {"partial_rotary_factor": 1.0},
    "no qk norm": {"use_qk_norm": False},
    "no shared experts": {"num_shared_experts": None},
    "no routed scaling": {"routed_scaling_factor": 1.0},
}


@pytest.mark.parametrize("option", [*LLADA2_OPTIONS, "no expert bias", "interleaved rope"])
def test_the_tiny_llada2_configs_exercise_each_option(llada2: Built, option: str,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    _, cfg, state = llada2
    ids = prompt_ids(21, seed=3)
    allowed = ref.block_causal(21, BLOCK)
    base = ref.llada2_logits(cfg, state, ids, allowed)
    if option == "no expert bias":
        state = {k: v for k, v in state.items() if not k.endswith("expert_bias")}
    elif option == "interleaved rope":
        monkeypatch.setattr(ref, "rotate_half", interleaved_rotate)
    else:
        over = LLADA2_OPTIONS[option]
        cfg = cfg | {k: min(v, cfg["n_group"]) if k == "topk_group" else v for k, v in over.items()}
    assert max_diff(ref.llada2_logits(cfg, state, ids, allowed), base) > 100 * ATOL, option


def test_the_tiny_llada_and_dream_configs_exercise_rope_layout(tmp_path_factory: pytest.TempPathFactory,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    ids = prompt_ids(19, seed=7)
    runs: list[tuple[Callable[[ref.Config, ref.State, list[int]], Tensor], ref.Config, ref.State]] = []
    for writer in (write_llada_variant, write_dream_variant):
        cfg, state = ref.load_checkpoint(writer(tmp_path_factory.mktemp(writer.__name__)))
        runs.append((ref.llada_logits if writer is write_llada_variant else ref.dream_logits, cfg, state))
    base = [f(cfg, state, ids) for f, cfg, state in runs]
    monkeypatch.setattr(ref, "rotate_half", interleaved_rotate)
    for (f, cfg, state), want in zip(runs, base, strict=True):
        assert max_diff(f(cfg, state, ids), want) > 100 * ATOL


# -- decoding: the cached engine against LLaDA2's published generate() ----------------------------
def engine_decode(lm: LoadedModel, prompt: list[int], gen_length: int, policy: Policy) -> tuple[list[int], int]:
    """The engine's cached block decoding of `prompt` with `policy`. The end-of-middle id is
    moved off the vocabulary: the published loop stops after a block holding end-of-text, the
    engine at the token itself, and this comparison is about the commits, not the stop."""
    special = replace(lm.config.special, end_of_middle=VOCAB + 1, end_of_text=VOCAB + 1)
    seq = Sequence(prompt, special, policy, BLOCK, gen_length, shift=False, max_len=MAX_LEN, align=True,
                   end_ahead_min=0.0)
    lm.model.setup_cache(1, MAX_LEN)  # type: ignore[operator]
    for _ in steps_alone(lm.model, seq):
        pass
    assert seq.done()
    return seq.middle.tolist(), seq.forwards


def n_blocks(prompt_len: int, gen_length: int) -> int:
    return -(-(prompt_len + gen_length) // BLOCK) - prompt_len // BLOCK


@pytest.mark.parametrize("prompt_len", [13, 16])  # a prompt tail in the first block, and none
def test_llada2_decoding_matches_the_published_generate(llada2_decoding: Built, prompt_len: int) -> None:
    """LLaDA2.0's rule against the engine's Fast-dLLM threshold policy (the most confident
    masked position when none passes)."""
    lm, cfg, state = llada2_decoding
    # the tied variant is far surer of itself: each threshold lets some steps commit several
    threshold = 0.5 if cfg["tie_word_embeddings"] else 0.2
    prompt, gen_length = prompt_ids(prompt_len, seed=prompt_len), 3 * BLOCK
    want, want_forwards = ref.llada2_generate(cfg, state, prompt, gen_length, BLOCK, threshold, MASK)
    policy = make_policy("threshold", threshold=threshold, fallback="max")
    got, forwards = engine_decode(lm, prompt, gen_length, policy)
    assert got == want and forwards == want_forwards
    # both rules ran: some steps committed several tokens, some only the forced one
    assert MASK not in got and n_blocks(prompt_len, gen_length) < forwards < len(got)


@pytest.mark.parametrize("prompt_len", [13, 16])
def test_llada2_edit_decoding_matches_the_published_generate(llada2_decoding: Built, prompt_len: int) -> None:
    """LLaDA2.1's rule (M2T commits, T2T edits of earlier non-prompt tokens of the block, then
    up to `max_post_steps` edit-only steps until one changes nothing) against the engine's
    draft-edit policy with the engine-only refinements turned off."""
    lm, cfg, state = llada2_decoding
    mask_threshold, edit_threshold = (0.5, 0.3) if cfg["tie_word_embeddings"] else (0.2, 0.15)
    prompt, gen_length, post = prompt_ids(prompt_len, seed=prompt_len), 3 * BLOCK, 4
    want, want_forwards = ref.llada2_generate(cfg, state, prompt, gen_length, BLOCK, mask_threshold, MASK,
                                              edit_threshold=edit_threshold, max_post_steps=post)
    policy = make_policy("draft_edit", mask_threshold=mask_threshold, edit_threshold=edit_threshold,
                         edit_passes=post, skip_confident_blocks=False, fallback="max", loop_repeats=0)
    got, forwards = engine_decode(lm, prompt, gen_length, policy)
    assert got == want and forwards == want_forwards
    assert MASK not in got
    # the edits mattered: the same commits without them end elsewhere
    no_edits, _ = ref.llada2_generate(cfg, state, prompt, gen_length, BLOCK, mask_threshold, MASK)
    assert no_edits != want


# -- config keys read as the published code reads them ---------------------------------------------
@pytest.mark.parametrize(("keys", "kv_heads"), [
    ({"n_kv_heads": None, "multi_query_attention": True}, 1),
    ({"n_kv_heads": 1, "multi_query_attention": True}, 1),
    ({"n_kv_heads": None, "multi_query_attention": None}, 8),
    ({"n_kv_heads": 2, "multi_query_attention": None}, 2),
    ({"n_kv_heads": 8, "multi_query_attention": False}, 8),
])
def test_llada_kv_heads_follow_effective_n_kv_heads(keys: ref.Config, kv_heads: int) -> None:
    from engine.model.adapters.llada import LLaDAConfig

    assert LLaDAConfig.from_hf({"n_heads": 8, "d_model": 64} | keys).kv_heads == kv_heads


@pytest.mark.parametrize("keys", [
    {"n_kv_heads": 2, "multi_query_attention": True},  # contradictory, as the published config says
    {"include_bias": True},  # biased layer norms, which the adapter's RMSNorm lacks
    {"bias_for_layer_norm": True},
    {"layer_norm_with_affine": False},
    {"block_group_size": 2},  # renames the blocks `block_groups.N.M`
])
def test_llada_rejects_what_it_would_misread(keys: ref.Config) -> None:
    from engine.model.adapters.llada import LLaDAConfig

    with pytest.raises(ValueError, match="llada"):
        LLaDAConfig.from_hf({"n_heads": 8, "d_model": 64} | keys)


# -- bfloat16: the real checkpoints' own dtype (issue 40) -----------------------------------------
BF16_REL = 0.05  # bf16 keeps 8 bits of mantissa: a few percent of the logits' range, summed over layers


@pytest.mark.parametrize("writer, logits", [(write_llada2, "llada2"), (write_llada2_variant, "llada2"),
                                            (write_llada, "llada"), (write_llada_variant, "llada"),
                                            (write_dream, "dream"), (write_dream_variant, "dream")])
def test_bf16_logits_track_the_published_forward(tmp_path_factory: pytest.TempPathFactory, writer: Writer,
                                                 logits: str) -> None:
    """The adapters in bfloat16 (the dtype the loader now defaults to for real checkpoints) against
    the float32 reference on the same (bf16-stored) weights: close, and where the argmax differs
    the reference rates bf16's choice within that tolerance of its own best."""
    path = writer(tmp_path_factory.mktemp("bf16"))
    cfg, state = ref.load_checkpoint(path)
    lm = load_model(path, dtype=torch.bfloat16)
    assert next(lm.model.parameters()).dtype == torch.bfloat16
    ids = prompt_ids(24, seed=3)
    if logits == "llada2":
        allowed = ref.block_causal(len(ids), BLOCK)
        want, got = ref.llada2_logits(cfg, state, ids, allowed), adapter_logits(lm, ids, allowed)
    else:
        want = ref.llada_logits(cfg, state, ids) if logits == "llada" else ref.dream_logits(cfg, state, ids)
        got = adapter_logits(lm, ids, None)
    got = got.float()
    tol = BF16_REL * float(want.abs().max())
    assert max_diff(got, want) <= tol
    picked = want.gather(-1, got.argmax(-1, keepdim=True))[..., 0]
    assert bool((want.max(-1).values - picked <= tol).all())
    assert float((got.argmax(-1) == want.argmax(-1)).float().mean()) >= 0.75
