"""Dream adapter: real config keys and weight names load offline; shifted logits (output
p - 1 predicts position p) through the approximate cache against uncached full forwards."""

from __future__ import annotations

import pytest
import torch

from engine.decoding.decode_bidir import make_sequence
from engine.decoding.policies import make_policy
from engine.model.loader import LoadedModel
from tests.engine.model.adapters import bidir_checks as bc
from tests.engine.model.adapters.tiny_ckpts import EOS, MASK, PAD, prompt_ids, write_dream


@pytest.fixture(scope="module")
def dream(tmp_path_factory: pytest.TempPathFactory) -> LoadedModel:
    return bc.cached_model(tmp_path_factory, write_dream)


def test_loads_bidirectional_shifted(dream: LoadedModel) -> None:
    c = dream.config
    assert dream.family == "dream" and dream.cache == "approximate"
    assert c.attention == "bidirectional" and c.shift_logits
    assert (c.special.mask, c.special.end_of_text, c.special.pad) == (MASK, EOS, PAD)


def test_step_refresh_equals_uncached(dream: LoadedModel) -> None:
    bc.check_step_refresh_is_uncached(dream, prompt_ids(10, seed=2), prompt_ids(5, seed=3))


def test_block_refresh_is_close_to_uncached(dream: LoadedModel) -> None:
    _, partial = bc.check_block_refresh_is_close(dream, prompt_ids(10, seed=2), prompt_ids(5, seed=3))
    assert partial > 0


def test_partial_step_feeds_the_position_before_the_block(dream: LoadedModel) -> None:
    from engine.decoding.batch import execute, new_slot_attrs

    seq = make_sequence(dream.model, prompt_ids(10), make_policy("one_per_step"), 16, block=8, max_len=256)
    attrs = new_slot_attrs(256, 0)
    (lg,) = execute(dream.model, [seq], [seq.prepare()], [attrs])  # type: ignore[arg-type]
    seq.update(lg)
    feed = seq.prepare()
    assert feed.pos[0] == seq.P - 1 and len(feed.ids) == 9 and feed.kv_len == seq.L


def test_cached_step_is_exact_when_nothing_changed(dream: LoadedModel) -> None:
    bc.check_cached_step_exact_on_unchanged_canvas(dream, prompt_ids(10, seed=2), prompt_ids(5, seed=3))


def test_batched_rows_match_single(dream: LoadedModel) -> None:
    """Two requests of different lengths in one forward (the scheduler's way) = one at a time."""
    from engine.decoding.batch import execute, new_slot_attrs

    m = dream.model
    m.setup_cache(2, 256)
    try:
        specs = [(prompt_ids(10, seed=4), prompt_ids(3, seed=5)), (prompt_ids(17, seed=6), [])]
        singles = []
        for p, s in specs:
            q = make_sequence(m, p, make_policy("threshold"), 16, suffix=s, block=8, max_len=256)
            attrs = new_slot_attrs(256, 0)
            out = []
            for _ in range(3):
                (lg,) = execute(m, [q], [q.prepare()], [attrs])  # type: ignore[arg-type]
                out.append(lg)
                q.update(lg)
            singles.append(out)
        seqs = [make_sequence(m, p, make_policy("threshold"), 16, suffix=s, block=8, max_len=256, row=r)
                for r, (p, s) in enumerate(specs)]
        attrs2 = [new_slot_attrs(256, 0), new_slot_attrs(256, 0)]
        for step in range(3):
            got = execute(m, seqs, [q.prepare() for q in seqs], attrs2)  # type: ignore[arg-type]
            for r, q in enumerate(seqs):
                assert torch.allclose(got[r], singles[r][step], atol=1e-5)
                q.update(got[r])
    finally:
        m.setup_cache(1, 256)
