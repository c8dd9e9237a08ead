"""Alternatives (engine.alternatives): forks from the next most likely first tokens, decoded in
the same forwards as their request, give what each gives alone; the primary is untouched;
the group's latency is bounded; the text engine returns the forks' texts on done."""

from __future__ import annotations

import pytest
import torch

from engine.alternatives import (
    PRESET_ALTERNATIVES,
    alternatives_for,
    fork_tokens,
    group_stats,
    only,
    run_group,
)
from engine.api import MAX_ALTERNATIVES, CompletionRequest, Plan
from engine.batch import generate
from engine.decode import Sequence
from engine.model import ModelConfig, Transformer
from engine.policies import make_policy
from tests.engine.conftest import prompt_of

INF = float("inf")


def seq_of(cfg: ModelConfig, prompt: list[int], row: int, first: int | None = None, max_new: int = 12,
           policy: str = "speedy") -> Sequence:
    allowed = only(first, cfg.vocab_size) if first is not None else None
    return Sequence(prompt, cfg.special, make_policy(policy), cfg.block_size, max_new, cfg.shift_logits,
                    row=row, first_allowed=allowed)


def test_fork_tokens_take_the_next_ranks_and_skip_disallowed() -> None:
    logits = torch.tensor([0.1, 3.0, -INF, 2.0, 1.0])
    assert fork_tokens(logits, 3) == [3, 4]
    assert fork_tokens(logits, 5) == [3, 4, 0]  # -inf never counts
    assert fork_tokens(logits, 1) == []
    assert fork_tokens(torch.tensor([5.0, -INF, -INF]), 3) == []  # healing allowed one token


def test_alternatives_for_follows_the_preset_unless_the_plan_says() -> None:
    assert alternatives_for(Plan(), "speedy") == 1
    assert alternatives_for(Plan(), "quality") == PRESET_ALTERNATIVES["quality"] > 1
    assert alternatives_for(Plan(preset="speedy"), "quality") == 1
    assert alternatives_for(Plan(alternatives=2), "speedy") == 2
    assert alternatives_for(Plan(alternatives=99), "speedy") == MAX_ALTERNATIVES


def test_forks_batched_with_their_request_equal_each_decoded_alone(tiny: Transformer, cfg: ModelConfig) -> None:
    prompt = prompt_of(cfg, [11, 12, 13, 14], [21, 22])
    alone = seq_of(cfg, prompt, 0)
    alone_events = list(generate(tiny, alone))
    primary, forks = seq_of(cfg, prompt, 0), []
    events = list(run_group(tiny, primary, 2, lambda tok, row: seq_of(cfg, prompt, row, tok), tiny.cache_len,
                            forks=forks))
    # the primary decodes exactly as without its fork
    assert primary.final_middle() == alone.final_middle()
    assert [(e.kind, e.fills, e.edits) for e in events] == [(e.kind, e.fills, e.edits) for e in alone_events]
    assert primary.first_logits is not None
    (tok,) = fork_tokens(primary.first_logits, 2)
    assert tok != primary.final_middle()[0] or primary.final_middle()[0] == cfg.special.end_of_middle
    (fork,) = forks
    assert fork.row == 1 and fork.final_middle()[0] == tok
    solo = seq_of(cfg, prompt, 0, tok)
    list(generate(tiny, solo))
    assert fork.final_middle() == solo.final_middle()
    st = group_stats(primary, forks)
    assert st["alternative_rows"] == 1 and st["alternative_row_forwards"] == fork.forwards > 0
    # the request's forwards: every forward that carried the primary or its fork, once
    assert fork.tally is primary.tally
    assert primary.forwards <= primary.tally.forwards and fork.forwards < primary.tally.forwards
    assert primary.tally.forwards <= primary.forwards + max(cfg.block_size, primary.forwards)


def test_a_fork_that_would_outlast_its_request_is_dropped(tiny: Transformer, cfg: ModelConfig) -> None:
    prompt = prompt_of(cfg, [11, 12, 13], [])
    primary = seq_of(cfg, prompt, 0, max_new=cfg.block_size, policy="one_per_step")
    forks: list[Sequence] = []
    made: list[Sequence] = []

    def slow(tok: int, row: int) -> Sequence:  # one token a forward over a long budget
        made.append(seq_of(cfg, prompt, row, tok, max_new=40 * cfg.block_size, policy="one_per_step"))
        return made[-1]

    events = list(run_group(tiny, primary, 2, slow, tiny.cache_len, forks=forks))
    assert events[-1].kind == "done" and primary.done()
    assert len(made) == 1 and not made[0].done() and forks == []
    assert made[0].forwards <= primary.forwards + max(cfg.block_size, primary.forwards)


def test_forks_start_after_the_first_complete_draft_and_cancel_stops_the_group(tiny: Transformer,
                                                                               cfg: ModelConfig) -> None:
    prompt = prompt_of(cfg, [11, 12, 13], [])
    primary = seq_of(cfg, prompt, 0, max_new=24, policy="one_per_step")
    made: list[Sequence] = []
    events: list = []
    drafted_when_forked: list[bool] = []

    def fork(tok: int, row: int) -> Sequence:
        drafted_when_forked.append(any(e.complete for e in events))
        made.append(seq_of(cfg, prompt, row, tok, max_new=24, policy="one_per_step"))
        return made[-1]

    def cancel() -> bool:  # checked before every forward: stop once the fork took two
        return bool(made) and made[0].forwards >= 2

    for ev in run_group(tiny, primary, 2, fork, tiny.cache_len, cancel=cancel):
        events.append(ev)
    assert drafted_when_forked == [True]  # the fork never slowed the first answer
    assert not events[0].complete and primary.forwards > 1
    assert events[-1].kind == "done" and events[-1].reason == "cancelled"
    assert made[0].forwards == 2 and not made[0].done()  # the group stopped with the fork unfinished


def test_a_fork_that_fails_to_start_leaves_its_request_alone(tiny: Transformer, cfg: ModelConfig) -> None:
    prompt = prompt_of(cfg, [11, 12, 13], [])

    def broken(tok: int, row: int) -> Sequence:
        raise RuntimeError("no room for an alternative")

    alone, primary, forks = seq_of(cfg, prompt, 0), seq_of(cfg, prompt, 0), []
    list(generate(tiny, alone))
    events = list(run_group(tiny, primary, 3, broken, tiny.cache_len, forks=forks))
    assert events[-1].kind == "done" and forks == [] and primary.final_middle() == alone.final_middle()


@pytest.fixture(scope="module")
def embedded():  # noqa: ANN201 - the embedded model, trained and committed
    from engine.service import TextEngine

    return TextEngine(threads=2)


def test_text_engine_returns_distinct_alternatives_and_keeps_the_primary(embedded) -> None:  # noqa: ANN001
    prefix = "import os\n\n\ndef data_path(name):\n    base = os.path.dirname(__file__)\n    return "
    results = {}
    for n in (1, 3):
        embedded.prompt_cache.clear()
        plan = Plan(max_tokens=24, stop="line", alternatives=n)
        results[n] = list(embedded.complete(CompletionRequest(f"r{n}", "d", prefix, "\n", plan)))[-1]
    one, three = results[1], results[3]
    assert one.alternatives == ()
    assert three.text == one.text  # the forks do not disturb the primary
    assert 1 <= len(three.alternatives) <= 2
    assert len(set(three.alternatives)) == len(three.alternatives) and one.text not in three.alternatives
    assert three.stats["alternative_rows"] == len(three.alternatives) or len(three.alternatives) < 2
    # the forks' forwards are the request's: more than the primary's own, fewer than decoded apart
    assert three.stats["forwards"] >= three.stats["primary_forwards"] == one.stats["forwards"]
    assert three.stats["tpf"] == three.stats["tokens"] / three.stats["forwards"]
