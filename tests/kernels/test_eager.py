"""The fast eager confidence path against the reference specification."""

from __future__ import annotations

import pytest
import torch

import kernels.eager as eager
from kernels.eager import EXP, EXP2, Base, eager_confidence_tensors
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


@pytest.fixture(params=[EXP, EXP2], ids=lambda b: b.name)
def each_base(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Base:
    """Run a test with each exponential: the process keeps whichever is faster on its CPU."""
    monkeypatch.setattr(eager, "base", lambda: request.param)
    return request.param  # type: ignore[no-any-return]


def current_ids(n: int, v: int, seed: int) -> torch.Tensor:
    ids = torch.randint(0, v, (n,), generator=torch.Generator().manual_seed(seed))
    ids[::3] = -1  # no current token
    if n > 4:
        ids[4] = v  # out of range: probability 0
    return ids


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("n,v", [(1, 1000), (7, 4099), (33, 4096), (16, 157_184)])
def test_irregular_shapes(n: int, v: int, dtype: torch.dtype, each_base: Base) -> None:
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
    from kernels.eager import CHUNK_VALUES, CONVERTED_CHUNK_VALUES, rows_per_chunk

    v = 65_536
    rows = rows_per_chunk(v, CHUNK_VALUES if dtype == torch.float32 else CONVERTED_CHUNK_VALUES)
    assert rows >= 2
    n = 3 * rows + 1
    logits = (torch.randn(n, v, generator=torch.Generator().manual_seed(11)) * 3).to(dtype)
    logits[rows + 1] = NEG_INF  # a dead row inside a middle chunk
    before = logits.clone()
    check(logits, current_ids(n, v, 5), None)
    assert torch.equal(logits, before)


def test_a_small_vocabulary_block_is_one_chunk_and_the_chunking_changes_no_bit(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """tiny-code's 32-row block over 4,096 ids goes in one chunk (four calls of a dozen small
    ops cost more than the arithmetic); cut into 4-row chunks, as converted logits of a 126,464
    vocabulary are, every output is bit for bit the same."""
    assert eager.rows_per_chunk(4096) >= 32 and eager.rows_per_chunk(126_464) == 1
    assert eager.rows_per_chunk(126_464, eager.CONVERTED_CHUNK_VALUES) == 4
    logits = torch.randn(32, 4096, generator=torch.Generator().manual_seed(3)) * 4
    cur = current_ids(32, 4096, 7)
    whole = eager_confidence_tensors(logits, cur, want_margin=True)
    monkeypatch.setattr(eager, "CHUNK_VALUES", 4 * 4096)
    assert eager.rows_per_chunk(4096) == 4
    fours = eager_confidence_tensors(logits, cur, want_margin=True)
    for a, b in zip(whole, fours, strict=True):
        assert a is not None and b is not None and torch.equal(a, b)


@pytest.mark.parametrize("v", [1, 255, 256, 300, 1000, 4096, 126_464])
def test_first_max_is_max_with_indices_bit_for_bit(v: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The segment search gives what `max(dim=1)` gives: the value and its lowest column,
    where the maximum repeats across segments, sits in the short last segment (whose gathered
    columns repeat column v - 1), at either end, or fills a dead row. (Segments for every
    size here: by default a small block takes `max` itself.)"""
    import kernels.eager as eager
    from kernels.eager import SEGMENT, first_max

    monkeypatch.setattr(eager, "SEGMENTED_FROM", 0)

    g = torch.Generator().manual_seed(v)
    x = torch.randn(8, v, generator=g) * 3
    x[1, -1] = 99.0  # the last column: inside the short last segment when v % SEGMENT
    x[2, 0] = 99.0
    x[3, [v // 2, v - 1]] = 99.0  # a tie across segments: the lower column wins
    x[4, [min(v - 1, SEGMENT), min(v - 1, SEGMENT + 1)]] = 99.0  # a tie at a segment's first columns
    x[5] = NEG_INF  # dead: column 0, as `max` gives
    x[6, :] = 7.0  # all equal: column 0
    for dtype in (torch.float32, torch.bfloat16):
        y = x.to(dtype)
        top, ids = first_max(y)
        want_top, want_ids = y.max(dim=1, keepdim=True)
        assert torch.equal(top, want_top) and torch.equal(ids, want_ids.squeeze(1))


def test_wide_logits_match_and_a_disallowed_current_token_is_exactly_zero(each_base: Base) -> None:
    """Gaps to the maximum past 87 (where `exp` gives subnormal floats; the exponents are
    floored at 2^-120) still match the reference, a row with one logit far above the rest has
    probability 1, and a current token at -inf (disallowed) has probability exactly 0, not the
    floor's 2^-120 over the sum."""
    g = torch.Generator().manual_seed(5)
    logits = torch.randn(8, 5000, generator=g) * 20
    logits[0, 7] = 400.0  # every other logit is more than 120 x ln 2 below
    check(logits, current_ids(8, 5000, 9))
    allowed = torch.zeros(5000, dtype=torch.bool)
    allowed[::2] = True
    cur = torch.arange(8) * 2 + 1  # odd: disallowed
    top_id, top_prob, cur_prob, _ = eager_confidence_tensors(logits, cur, allowed=allowed)
    assert cur_prob is not None and torch.equal(cur_prob, torch.zeros(8))
    assert bool((top_id % 2 == 0).all())
    assert float(eager_confidence_tensors(logits)[1][0]) == 1.0


@pytest.mark.parametrize("spread", [1.0, 4.0, 10.0])
def test_the_probabilities_are_as_accurate_as_float32_exp(spread: float, each_base: Base) -> None:
    """Against float64, the top and current probabilities err by about one float32 rounding
    of each exponent (~2e-7 relative), with either exponential: the exp2 form must not scale
    the logits before the shift (that rounding costs ~1e-6 at these spreads). One rounding
    needs torch's vectorised fused multiply-add (AVX2, AVX-512, NEON); its portable build
    rounds twice, still well inside the contract's 1e-5."""
    bound = 2e-6 if torch.backends.cpu.get_cpu_capability() == "DEFAULT" else 5e-7
    g = torch.Generator().manual_seed(int(spread))
    logits = torch.randn(32, 126_464, generator=g) * spread
    cur = logits.topk(3, dim=1).indices[:, 2]  # each row's third token: a probability that counts
    want = torch.softmax(logits.double(), dim=1)
    top_id, top_prob, cur_prob, _ = eager_confidence_tensors(logits, cur)
    assert cur_prob is not None
    for got, exact in ((top_prob, want.amax(dim=1)), (cur_prob, want.gather(1, cur[:, None]).squeeze(1))):
        err = float(((got.double() - exact) / exact).abs().max())
        assert err < bound, err
    assert torch.equal(top_id, want.argmax(dim=1))


def test_the_exponential_is_timed_once_and_exp2_needs_a_clear_lead() -> None:
    """`base` keeps one exponential for the process (timed on first use, on one thread, then
    cached; the caller's thread count is left as it was): exp2 only
    when it beats exp by the margin, so a CPU where the two run even decides alike every run.
    Each base's floor is 2^-120, the smallest exponential it leaves unfloored a normal float."""
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        eager.base.cache_clear()  # timed here, on one thread, and the count in force put back
        chosen = eager.base()
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(threads)
    assert chosen in (EXP, EXP2) and eager.base() is chosen
    assert eager.choose(1.0, 0.5) is EXP2 and eager.choose(1.0, 0.9) is EXP and eager.choose(0.5, 1.0) is EXP
    for b in (EXP, EXP2):
        smallest = b.exp_(torch.tensor([b.floor]))
        assert float(smallest) == pytest.approx(2.0 ** -120, rel=1e-5)
        assert float(smallest) >= torch.finfo(torch.float32).tiny
