"""Data echoing: a built batch under fresh diffusion noise, and when a batch is used again."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from engine.model.checkpoint import EMBEDDED_DIR
from engine.model.native import NOISY
from engine.prompt.tokenizer import load_tokenizer, special_tokens_of
from engine.train.data import KEPT_WEIGHT, MIN_T, N_SPECIAL, Batch, ExampleStream, make_batch
from engine.train.echo import Echo, batch_index, echo_batch, renoise

ROOT = Path(__file__).resolve().parents[3]
TEXTS = [(ROOT / "engine" / name).read_text() for name in ("decoding/decode.py", "decoding/scheduler.py", "service.py")]
SP = special_tokens_of(load_tokenizer(EMBEDDED_DIR))
BLOCK = 16


def _batch(n: int = 6, seed: int = 5, diffusion: bool = True) -> Batch:
    tok = load_tokenizer(EMBEDDED_DIR)
    s = ExampleStream(TEXTS, [1.0] * len(TEXTS), tok, SP, BLOCK, seed=seed)
    rows = [s.next() for _ in range(n)]
    return make_batch(rows, SP, 4096, BLOCK, torch.Generator().manual_seed(seed), diffusion, with_mask=False)


def _again(b: Batch, seed: int) -> Batch:
    return renoise(b, torch.Generator().manual_seed(seed), SP.mask, 4096, BLOCK)


def test_renoise_keeps_the_clean_stream_and_targets_and_draws_consistent_noise() -> None:
    b = _batch()
    r = _again(b, 1)
    T, N = b.n_clean, b.noisy_target.shape[1]
    assert torch.equal(r.idx[:, :T], b.idx[:, :T]) and torch.equal(r.noisy_target, b.noisy_target)
    assert torch.equal(r.pos, b.pos) and torch.equal(r.kind, b.kind) and torch.equal(r.ar_weight, b.ar_weight)
    assert not torch.equal(r.idx[:, T:], b.idx[:, T:])  # new noise
    live = b.kind[:, T:] == NOISY
    assert torch.equal(r.idx[:, T:][~live], b.idx[:, T:][~live])  # padding untouched
    clean = torch.gather(b.idx[:, :T], 1, b.pos[:, T:])
    tok, scale = r.idx[:, T:], live.sum() / b.idx.shape[0]
    w = r.noisy_weight * scale  # undo the batch normalisation: per-token weights again
    for row in range(b.idx.shape[0]):
        for s in range(0, N, BLOCK):
            mask_w = set()
            for j in range(s + 1, s + BLOCK):  # slot j's token is predicted at slot j-1
                if not live[row, j]:
                    assert w[row, j - 1] == 0
                    continue
                got = float(w[row, j - 1])
                if tok[row, j] == SP.mask:
                    assert 1.0 - 1e-5 <= got <= 1 / MIN_T + 1e-4
                    mask_w.add(round(got, 4))
                elif tok[row, j] == clean[row, j]:
                    assert got == pytest.approx(KEPT_WEIGHT)  # (a random replacement may hit the same token)
                else:
                    assert got == pytest.approx(1.0) and int(tok[row, j]) >= N_SPECIAL
            assert len(mask_w) <= 1  # one mask ratio a block
            assert w[row, s + BLOCK - 1] == 0  # a block's last output predicts nothing
    assert torch.equal(_again(b, 1).idx, r.idx) and not torch.equal(_again(b, 2).idx, r.idx)


def test_renoise_draws_from_the_distribution_make_batch_draws_from() -> None:
    b = _batch(8)
    T = b.n_clean
    live = b.kind[:, T:] == NOISY
    clean = torch.gather(b.idx[:, :T], 1, b.pos[:, T:])

    def shares(x: Batch) -> tuple[float, float]:
        tok = x.idx[:, T:][live]
        masked = tok == SP.mask
        edited = ~masked & (tok != clean[live])
        return float(masked.float().mean()), float(edited.float().sum() / (~masked).sum())

    tok = load_tokenizer(EMBEDDED_DIR)
    s = ExampleStream(TEXTS, [1.0] * len(TEXTS), tok, SP, BLOCK, seed=5)
    rows = [s.next() for _ in range(8)]
    ours = [shares(_again(b, k)) for k in range(200)]
    theirs = [shares(make_batch(rows, SP, 4096, BLOCK, torch.Generator().manual_seed(100 + k), True,
                                with_mask=False)) for k in range(200)]
    for i in range(2):
        a, c = sum(x[i] for x in ours) / 200, sum(x[i] for x in theirs) / 200
        assert abs(a - c) < 0.03, (i, a, c)
    assert abs(sum(x[0] for x in ours) / 200 - (1 + MIN_T) / 2) < 0.03  # E[t]


def test_renoise_leaves_a_warm_up_batch_alone_and_refuses_teacher_rows() -> None:
    ar = _batch(diffusion=False)
    assert _again(ar, 0) is ar
    b = _batch()
    with pytest.raises(ValueError):
        _again(Batch(**{**b.__dict__, "certain": torch.zeros_like(b.noisy_target, dtype=torch.bool)}), 0)


def _drive(echo: Echo, readiness: list[bool], batches: list[Batch]) -> list[tuple[int, bool]]:
    """(which batch, fresh) for each step, batches fetched in order."""
    it = iter(batches)
    out = []
    for ready in readiness:
        b, fresh = echo.next(lambda: next(it), lambda r=ready: r, lambda h: h)
        out.append((next(i for i, x in enumerate(batches) if x is b), fresh))
    return out


def test_fixed_echo_uses_each_diffusion_batch_n_times_and_never_a_warm_up_batch() -> None:
    ar, d1, d2 = _batch(2, 1, False), _batch(2, 2), _batch(2, 3)
    got = _drive(Echo.parse("3"), [True] * 5, [ar, d1, d2])
    assert got == [(0, True), (1, True), (1, False), (1, False), (2, True)]
    assert _drive(Echo.parse("1"), [False] * 2, [d1, d2]) == [(0, True), (1, True)]


def test_auto_echo_repeats_only_while_the_next_batch_is_not_ready() -> None:
    d = [_batch(2, k) for k in range(1, 4)]
    e = Echo.parse("auto:2")
    got = _drive(e, [False, False, False, True, False], d)
    # fetched, again, then fetched although not ready (the cap: 2 uses), fetched when ready,
    # then again: the pool's batches in turn, not the newest again
    assert got == [(0, True), (0, False), (1, True), (2, True), (1, False)]
    assert e.echoed == 2


def test_an_echoed_batch_has_no_next_token_loss_and_the_pool_forgets_the_warm_up() -> None:
    b = _batch()
    e = echo_batch(b, torch.Generator().manual_seed(0), SP.mask, 4096, BLOCK)
    assert float(e.ar_weight.sum()) == 0 and float(b.ar_weight.sum()) > 0 and float(e.noisy_weight.sum()) > 0
    echo = Echo.parse("2")
    echo.next(lambda: b, lambda: False, lambda h: h)
    assert echo.next(lambda: b, lambda: False, lambda h: h)[1] is False and len(echo.pool) == 1
    echo.next(lambda: _batch(diffusion=False), lambda: False, lambda h: h)  # a warm-up batch
    assert not echo.pool


@pytest.mark.parametrize("spec", ["0", "auto:0", "x"])
def test_bad_echo_specs_are_refused(spec: str) -> None:
    with pytest.raises(ValueError):
        Echo.parse(spec)


def test_batch_index_follows_the_warm_up_then_the_groups() -> None:
    e = Echo.parse("4")
    assert [batch_index(s, 2, e) for s in (0, 1, 2, 3, 6, 7)] == [0, 1, 2, 3, 3, 4]
    assert batch_index(9, 2, Echo.parse("auto")) == 9

