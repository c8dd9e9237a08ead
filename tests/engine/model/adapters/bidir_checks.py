"""Shared checks for the bidirectional adapters (LLaDA-8B, Dream) and their decoder."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from engine.decoding.batch import execute, new_slot_attrs
from engine.decoding.decode_bidir import BidirSequence, make_sequence
from engine.decoding.policies import PRESETS, make_policy
from engine.model.loader import LoadedModel, load_model

BLOCK, MAX_LEN, NEW = 8, 256, 20
ATOL = 1e-5  # fp32 summation order
# approximate (block-refreshed) cache: see check_block_refresh_is_close
PROB_MEAN_TOL, PROB_MAX_TOL = 0.1, 0.5  # random tiny models are touchy: one stale step moves a row far


def cached_model(tmp: pytest.TempPathFactory, writer: Callable[[Path], Path]) -> LoadedModel:
    """The tiny checkpoint `writer` makes, loaded in float32 with a cache of one row of 256
    positions (what these checks decode in)."""
    lm = load_model(writer(tmp.mktemp(writer.__name__)), dtype=torch.float32)
    lm.model.setup_cache(1, 256)
    return lm

def full_logits(model: torch.nn.Module, canvas: list[int]) -> torch.Tensor:
    """The uncached reference: one bidirectional forward over the whole canvas."""
    n = len(canvas)
    with torch.no_grad():
        return model(torch.tensor([canvas]), torch.arange(n)[None])[0]


def seq_for(lm: LoadedModel, name: str, prompt: list[int], suffix: list[int], refresh: str) -> BidirSequence:
    s = make_sequence(lm.model, prompt, make_policy(name), NEW, suffix=suffix, block=BLOCK, max_len=MAX_LEN,
                      refresh=refresh)  # type: ignore[arg-type]
    assert isinstance(s, BidirSequence)
    return s


def check_step_refresh_is_uncached(lm: LoadedModel, prompt: list[int], suffix: list[int]) -> None:
    """refresh="step" through the cache row == uncached full forwards, for every preset."""
    m = lm.model
    for name in PRESETS:
        seq, ref = seq_for(lm, name, prompt, suffix, "step"), seq_for(lm, name, prompt, suffix, "step")
        attrs = new_slot_attrs(MAX_LEN, 0)
        while not seq.done():
            feed = seq.prepare()
            want = full_logits(m, ref.canvas())[ref.prepare().logits_at]
            (got,) = execute(m, [seq], [feed], [attrs])  # type: ignore[arg-type]
            assert torch.allclose(got, want, atol=ATOL), (name, float((got - want).abs().max()))
            seq.update(got)
            ref.update(want)
        assert seq.final_middle() == ref.final_middle() and seq.forwards == ref.forwards, name
        assert seq.refreshes == seq.forwards


def check_cached_step_exact_on_unchanged_canvas(lm: LoadedModel, prompt: list[int], suffix: list[int]) -> None:
    """A block step that reads the cache right after its refresh, with the canvas unchanged,
    must give the refresh's own logits: positions, slots, shift and suffix are right, and
    the only approximation left is the staleness of the other positions."""
    m = lm.model
    seq = seq_for(lm, "threshold", prompt, suffix, "block")
    attrs = new_slot_attrs(MAX_LEN, 0)
    for start in (0, BLOCK):
        seq.block_start, seq.fresh_at = start, None
        feed = seq.prepare()
        assert seq._full
        (fresh,) = execute(m, [seq], [feed], [attrs])  # type: ignore[arg-type]
        seq.fresh_at = start
        feed = seq.prepare()
        assert not seq._full and len(feed.ids) == BLOCK + int(lm.config.shift_logits)
        (cached,) = execute(m, [seq], [feed], [attrs])  # type: ignore[arg-type]
        assert torch.allclose(cached, fresh, atol=ATOL), float((cached - fresh).abs().max())


def check_block_refresh_is_close(lm: LoadedModel, prompt: list[int], suffix: list[int]) -> tuple[float, int]:
    """refresh="block": each block's first step is exact; later steps read a stale cache.
    Stated tolerance, on these tiny random (hence touchy) models: per cached step, the
    largest change of any probability of the active block against a full forward over the
    same canvas averages <= PROB_MEAN_TOL and never exceeds PROB_MAX_TOL.
    Returns (that average, the number of cached steps)."""
    m, sh = lm.model, int(lm.config.shift_logits)
    row_max: list[float] = []
    for name in PRESETS:
        seq = seq_for(lm, name, prompt, suffix, "block")
        attrs = new_slot_attrs(MAX_LEN, 0)
        while not seq.done():
            feed = seq.prepare()
            full, multi = seq._full, seq.phase == "multi"
            blk = seq._block()
            want = full_logits(m, seq.canvas())
            want = want[feed.logits_at] if multi else want[[seq.P + j - sh for j in range(blk.start, blk.stop)]]
            (got,) = execute(m, [seq], [feed], [attrs])  # type: ignore[arg-type]
            if full:
                assert torch.allclose(got, want, atol=ATOL), (name, float((got - want).abs().max()))
            else:
                row_max.append(float((got.softmax(-1) - want.softmax(-1)).abs().max()))
            seq.update(got)
        assert seq.done() and lm.config.special.mask not in seq.final_middle()
        assert seq.refreshes <= -(-seq.cap // BLOCK) + seq.multi_pass  # one per block (+ multi passes)
    mean = sum(row_max) / max(1, len(row_max))
    assert mean <= PROB_MEAN_TOL and max(row_max, default=0.0) <= PROB_MAX_TOL, (mean, max(row_max))
    return mean, len(row_max)
