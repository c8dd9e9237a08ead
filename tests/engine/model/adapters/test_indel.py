"""In/del decoding (LLaDA2.2's Levenshtein editing, engine.decoding.indel) against SGLang 0.5.23's
own `JointThresholdInDel`, the pinned wheel's code (sglang_indel.py says what runs and what is
stubbed), on the tiny LLaDA2.2 fixture with its [MASK] head row as written and its head biased
so that the model emits DELETE and INSERT: block for block after every step, step for step,
over 24 prompts that delete, insert, trip the loop guard, fall back from [MASK] and end in the
cleanup round (by the post-edit budget and by the step cap). The engine's cached logits equal
the uncached window's at every step (a structural edit keeps the KV cache exact)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch

from engine.decoding.batch import execute, new_slot_attrs
from engine.decoding.decode_bidir import make_sequence
from engine.decoding.indel import InDelSequence, policy_for, restructure
from engine.decoding.policies import DraftEdit, InDel, InDelConfig, make_policy
from engine.model.loader import LoadedModel, load_model
from tests.engine.model.adapters import sglang_indel
from tests.engine.model.adapters.reference_models import block_causal
from tests.engine.model.adapters.tiny_ckpts import EOS, MASK, PAD, prompt_ids, write_llada2
from tests.engine.model.adapters.tiny_llada22 import (
    DELETE,
    ROUTING_BLOCK,
    SPLIT,
    edit_head_rows,
    write_llada22,
)
from tests.llada_lsp.engines.sglang_wheel import sources

MAX_LEN, TOL, GEN = 320, 1e-4, 40
# DELETE outranks token 24 and INSERT token 85 wherever those lead: rows chosen on this
# fixture so that the behaviours below occur (the tests assert each one did). [MASK] keeps
# its own row: where it leads at an original mask, the fallback decides.
BIAS = {DELETE: (24, 1.02), SPLIT: (85, 1.02 * 1.001)}
# (prompt length, seed, max_post_edit_steps): 24 prompts; 16 is the published budget
PROMPTS = [(n, seed, post) for n, seed in [(21, 10), (28, 11), (40, 12), (9, 3), (33, 4), (50, 5), (17, 6), (64, 7)]
           for post in (16, 4, 0)]


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = write_llada22(tmp_path_factory.mktemp("llada22_indel"))
    return edit_head_rows(out, BIAS, zero=(EOS, PAD))


@pytest.fixture(scope="module")
def lm(ckpt: Path) -> LoadedModel:
    m = load_model(ckpt, dtype=torch.float32)
    m.model.setup_cache(1, MAX_LEN)  # type: ignore[operator]
    return m


@pytest.fixture(scope="module")
def wheel() -> sglang_indel.Wheel:
    return sglang_indel.load(sources())


def uncached(lm: LoadedModel, window: list[int]) -> torch.Tensor:
    n = len(window)
    with torch.no_grad():
        return lm.model(torch.tensor([window]), torch.arange(n)[None], block_causal(n, ROUTING_BLOCK)[None, None])[0]


def run_engine(lm: LoadedModel, prompt: list[int], post: int, check_cache: bool = False
               ) -> tuple[InDelSequence, list[list[int]]]:
    m = lm.model
    seq = make_sequence(m, prompt, make_policy("indel", max_post_edit_steps=post), GEN, max_len=MAX_LEN)
    assert isinstance(seq, InDelSequence)
    attrs, states = new_slot_attrs(MAX_LEN, 0), []
    while not seq.done():
        feed, blk = seq.prepare(), seq._block()
        (got,) = execute(m, [seq], [feed], [attrs])  # type: ignore[arg-type]
        if check_cache:
            window = [*prompt, *seq.middle.tolist()][: seq._feed_start() + ROUTING_BLOCK]
            want = uncached(lm, window)[seq.P + blk.start: seq.P + blk.stop]
            assert float((got - want).abs().max()) <= TOL
        seq.update(got)
        states.append(seq.middle[blk].tolist())
    return seq, states


def run_sglang(lm: LoadedModel, wheel: sglang_indel.Wheel, prompt: list[int], post: int) -> sglang_indel.Run:
    algo = sglang_indel.make(wheel, ROUTING_BLOCK, MASK, DELETE, SPLIT, max_post_edit_steps=post)
    return sglang_indel.generate(algo, lambda w, a, b: uncached(lm, w)[a:b], prompt, GEN)


def compare(lm: LoadedModel, wheel: sglang_indel.Wheel, n: int, seed: int, post: int,
            check_cache: bool = False) -> tuple[bool, Counter[str]]:
    """Whether the engine decodes `prompt_ids(n, seed)` as the wheel does (every block after
    every step, the steps, the answer), and what the rule did."""
    prompt = prompt_ids(n, seed=seed)
    ref = run_sglang(lm, wheel, prompt, post)
    seq, states = run_engine(lm, prompt, post, check_cache)
    want = [s for steps in ref.blocks for s in steps]
    final = seq.final_middle()
    same = (states == want and seq.forwards == ref.steps
            and final == ref.canvas[n:n + GEN] and not {MASK, DELETE, SPLIT} & set(final))
    c = seq.counts
    cap = sum(len(steps) > ROUTING_BLOCK + post for steps in ref.blocks)  # blocks ended at the step cap
    return same, Counter(deletes=c.deletes, inserts=c.inserts, loop_guards=c.loop_guards, fallbacks=c.fallbacks,
                         cleanups=c.cleanups, capped=cap, sglang_forwards=ref.forwards, steps=ref.steps)


def test_the_engine_decodes_as_sglang_0_5_23_on_24_prompts(lm: LoadedModel, wheel: sglang_indel.Wheel) -> None:
    total: Counter[str] = Counter()
    differ: list[Any] = []
    for n, seed, post in PROMPTS:
        same, counts = compare(lm, wheel, n, seed, post)
        total.update(counts)
        if not same:
            differ.append((n, seed, post))
    assert differ == [], f"{len(differ)} of {len(PROMPTS)} prompts decode otherwise than SGLang 0.5.23: {differ}"
    for what in ("deletes", "inserts", "loop_guards", "fallbacks", "cleanups"):
        assert total[what] > 0, (what, total)  # each part of the rule took part (the step cap: below)


def stalling(block: list[int]) -> torch.Tensor:
    """Scripted logits [len, V] for a block's tokens (-1: a prompt position) that stall it: at the first position of the block's answer a mask predicts DELETE, at the second
    INSERT, elsewhere 7; a token predicts itself, but the block's last one its successor (p
    0.61 each). Each step then deletes the mask in front and splits the original one behind
    it again, while the last token changes (the block never repeats a state, so the loop
    guard stays out): an original mask remains until the step cap's cleanup round."""
    first = min(i for i, t in enumerate(block) if t != -1)
    out = torch.zeros(len(block), 96)
    for i, t in enumerate(block):
        if t == -1:
            want = 0
        elif t != MASK:
            want = (t + 1 if 10 <= t < 80 else 10) if i == len(block) - 1 else t
        else:
            want = DELETE if i == first else SPLIT if i == first + 1 else 7
        out[i, want] = 5.0
    return out


def test_a_stalled_block_ends_in_the_cleanup_round_at_the_step_cap(lm: LoadedModel, wheel: sglang_indel.Wheel) -> None:
    """Where original masks never run out, the block stops at block + max_post_edit_steps
    steps with a cleanup round that fills every mask: nothing of the answer is lost."""
    prompt, post = prompt_ids(21, seed=10), 4
    lead = len(prompt) % ROUTING_BLOCK

    def script(window: list[int], a: int, b: int) -> torch.Tensor:
        cut = len(prompt) - a  # the block's prompt positions (-1: no answer there)
        return stalling([-1] * max(cut, 0) + window[a + max(cut, 0):b])

    algo = sglang_indel.make(wheel, ROUTING_BLOCK, MASK, DELETE, SPLIT, max_post_edit_steps=post)
    ref = sglang_indel.generate(algo, script, prompt, GEN)
    seq = make_sequence(lm.model, prompt, make_policy("indel", max_post_edit_steps=post), GEN, max_len=MAX_LEN)
    assert isinstance(seq, InDelSequence)
    states = []
    while not seq.done():
        blk = seq._block()
        pad = lead if blk.start == 0 else 0
        seq.update(stalling([-1] * pad + seq.middle[blk].tolist())[pad:])
        states.append(seq.middle[blk].tolist())
    assert [len(steps) for steps in ref.blocks] == [ROUTING_BLOCK + post + 1] * 2  # both blocks hit the cap
    assert states == [s for steps in ref.blocks for s in steps] and seq.forwards == ref.steps
    final = seq.final_middle()
    assert len(final) == GEN and not {MASK, DELETE, SPLIT} & set(final)
    assert final == ref.canvas[len(prompt):len(prompt) + GEN] and seq.counts.cleanups == 2


@pytest.mark.parametrize(("n", "seed", "post"), [(21, 10, 4), (28, 11, 16), (40, 12, 1)])
def test_the_kv_cache_stays_exact_through_structural_edits(lm: LoadedModel, wheel: sglang_indel.Wheel,
                                                           n: int, seed: int, post: int) -> None:
    same, counts = compare(lm, wheel, n, seed, post, check_cache=True)
    assert same and counts["deletes"] + counts["inserts"] > 0


def test_restructure_is_the_wheels_edit_operation(wheel: sglang_indel.Wheel) -> None:
    M, D, S = MASK, DELETE, SPLIT
    algo = sglang_indel.make(wheel, 5, M, D, S)
    old = [M, 5, 6, M, 7]
    for new in ([3, D, 6, S, 7], [S, S, S, 4, 7], [D, D, 6, 1, 2], [1, 2, 3, 4, 5]):
        for orig in ([True, False, False, True, False], [True] * 5):
            want = algo._apply_edit_operations(list(new), list(old), list(orig), 0)
            assert restructure(new, old, orig, M, D, S) == want
    assert restructure([3, D, 6, S, 7], old, [True] * 5, M, D, S) == ([3, 6, M, M, 7], [True, True, False, True, True])


def test_the_defaults_are_the_wheels(wheel: sglang_indel.Wheel) -> None:
    algo = sglang_indel.make(wheel, ROUTING_BLOCK, MASK, DELETE, SPLIT)  # an empty --dllm-algorithm-config
    d = InDelConfig()
    assert (d.threshold, d.edit_threshold, d.max_post_edit_steps) == (
        algo.threshold, algo.edit_threshold, algo.max_post_edit_steps) == (0.5, 0, 16)


def test_presets_decode_the_published_rule_or_say_how_they_differ(lm: LoadedModel, tmp_path: Path) -> None:
    speedy, quality, multi, other = (policy_for(lm.model, p) for p in ("speedy", "quality", "speedy_multi",
                                                                        "one_per_step"))
    assert isinstance(speedy, InDel) and isinstance(quality, InDel)
    assert isinstance(multi, InDel) and isinstance(other, InDel)
    assert speedy.config == InDelConfig()  # the published rule
    assert quality.config == InDelConfig(threshold=0.9)  # its one difference: masks commit above 0.9
    assert multi.config == speedy.config and other.config == InDelConfig()
    lm21 = load_model(write_llada2(tmp_path / "llada21"), dtype=torch.float32)
    assert isinstance(policy_for(lm21.model, "speedy"), DraftEdit)  # LLaDA2.1: as before


@pytest.mark.parametrize("preset", ["indel", "speedy"])
def test_a_decoder_block_other_than_the_routing_block_is_refused(lm: LoadedModel, preset: str) -> None:
    with pytest.raises(ValueError, match=r"block_size \(32\), got 16"):
        make_sequence(lm.model, prompt_ids(9), make_policy(preset), 16, max_len=128, block=16)
    assert make_sequence(lm.model, prompt_ids(9), make_policy(preset), 16, max_len=128, block=32).b == 32


def test_indel_is_refused_without_edit_tokens(tmp_path: Path) -> None:
    lm21 = load_model(write_llada2(tmp_path / "llada21"), dtype=torch.float32)
    with pytest.raises(ValueError, match="delete_token_id and split_token_id"):
        make_sequence(lm21.model, prompt_ids(9), make_policy("indel"), 16, max_len=128)
