"""Each policy's rule on synthetic confidences (no model involved)."""

from __future__ import annotations

import torch

from engine.decoding.policies import BlockView, make_policy
from engine.decoding.policies.low_confidence import tokens_per_step


def view(top_prob: list[float], masked: list[bool], top_id: list[int] | None = None,
         current: list[int] | None = None, step: int = 0, masked_at_start: int | None = None) -> BlockView:
    n = len(top_prob)
    m = torch.tensor(masked)
    return BlockView(
        masked=m, editable=~m, live=torch.ones(n, dtype=torch.bool),
        current=torch.tensor(current or [0] * n), top_id=torch.tensor(top_id or [7] * n),
        top_prob=torch.tensor(top_prob), cur_prob=torch.zeros(n), step=step,
        masked_at_start=int(m.sum()) if masked_at_start is None else masked_at_start)


def test_threshold_commits_exactly_the_confident_masked_positions() -> None:
    p = make_policy("threshold", threshold=0.6)
    v = view([0.9, 0.6, 0.59, 0.95, 0.1], [True, True, True, False, True])
    assert p.decide(v).commit.tolist() == [True, True, False, False, False]


def test_threshold_commits_at_least_one() -> None:
    p = make_policy("threshold", threshold=0.99)
    d = p.decide(view([0.2, 0.5, 0.3, 0.9], [True, True, True, False]))
    assert d.commit.tolist() == [False, True, False, False]  # the most confident masked one


def test_one_per_step_commits_leftmost_masked_only() -> None:
    d = make_policy("one_per_step").decide(view([0.1, 0.9, 0.99, 0.2], [False, True, True, True]))
    assert d.commit.tolist() == [False, True, False, False] and not d.edit.any()


def llada_schedule(mask_count: int, steps: int) -> list[int]:
    """LLaDA's reference: base = count // steps, the remainder goes to the first steps."""
    out = [mask_count // steps] * steps
    for i in range(mask_count % steps):
        out[i] += 1
    return out


def test_low_confidence_matches_llada_schedule_and_order() -> None:
    for n, steps in [(16, 8), (13, 4), (5, 8), (32, 32), (7, 3)]:
        assert tokens_per_step(n, steps) == llada_schedule(n, steps)
    g = torch.Generator().manual_seed(3)
    probs = torch.rand(8, generator=g)
    p = make_policy("low_confidence", steps=3)
    masked = [True] * 8
    committed: list[int] = []
    for step in range(3):
        v = view(probs.tolist(), masked, step=step, masked_at_start=8)
        c = p.decide(v).commit
        k = int(c.sum())
        assert k == llada_schedule(8, 3)[step]
        cand = [i for i in range(8) if masked[i]]
        expect = sorted(cand, key=lambda i: -float(probs[i]))[:k]  # highest confidence first
        assert sorted(c.nonzero().flatten().tolist()) == sorted(expect)
        for i in expect:
            masked[i] = False
            committed.append(i)
    assert len(committed) == 8


def test_draft_edit_edits_only_where_argmax_differs_above_threshold() -> None:
    p = make_policy("speedy", mask_threshold=0.5, edit_threshold=0.8)
    v = view(top_prob=[0.9, 0.95, 0.7, 0.85, 0.6], masked=[False, False, False, False, True],
             top_id=[5, 6, 9, 3, 4], current=[5, 8, 1, 2, 0])
    d = p.decide(v)
    # pos 0: argmax equals current; pos 2: below the edit threshold; pos 4: masked, commits (0.6 >= 0.5)
    assert d.edit.tolist() == [False, True, False, True, False]
    assert d.commit.tolist() == [False, False, False, False, True]
    assert p.edit_only(v).tolist() == d.edit.tolist()


def test_presets_differ_by_thresholds_only() -> None:
    s, q = make_policy("speedy"), make_policy("quality")
    assert s.name == q.name == "draft_edit"
    assert s.config.mask_threshold < q.config.mask_threshold  # type: ignore[attr-defined]


def test_fallback_choices() -> None:
    v = view([0.2, 0.5, 0.3, 0.9], [True, True, True, False])
    assert make_policy("threshold", threshold=0.99).decide(v).commit.tolist() == [False, True, False, False]
    left = make_policy("threshold", threshold=0.99, fallback="leftmost").decide(v).commit
    assert left.tolist() == [True, False, False, False]
    assert make_policy("speedy", mask_threshold=0.99).decide(v).commit.tolist() == [True, False, False, False]
