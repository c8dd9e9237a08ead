"""Decoder contracts on a tiny random model: determinism, events, stop, budget, end, remask.
(Cancelling between forwards is the step loop's: tests/engine/decoding/test_scheduler.py and
tests/engine/test_service.py.)"""

from __future__ import annotations

import torch

from engine.decoding.decode import Sequence, Staged, TokenEvent
from engine.decoding.policies import PRESETS, make_policy
from engine.model.native import Transformer
from engine.presets import DEFAULT_PRESET, MODES, PRESET_NAMES
from tests.engine.conftest import decode_alone, prompt_of


def run(model: Transformer, name: str, max_new: int = 10, **kw: object) -> tuple[Sequence, list[TokenEvent]]:
    cfg = model.config
    prompt = prompt_of(cfg, list(range(10, 30)), list(range(40, 45)))
    seq = Sequence(prompt, cfg.special, make_policy(name), cfg.block_size, max_new, cfg.shift_logits,
                   max_len=512, **kw)  # type: ignore[arg-type]
    return seq, decode_alone(model, seq)


def replay(events: list[TokenEvent], cap: int, mask: int) -> list[int]:
    canvas = [mask] * cap
    for ev in events:
        for i, tok in ev.fills:
            assert canvas[i] == mask, "a fill lands on a masked position"
            canvas[i] = tok
        for i, old, new in ev.edits:
            assert canvas[i] == old, "an edit names the token it replaces"
            canvas[i] = new
    return canvas


def test_deterministic(tiny: Transformer) -> None:
    for name in PRESETS:
        a, _ = run(tiny, name)
        b, _ = run(tiny, name)
        assert a.final_middle() == b.final_middle() and a.forwards == b.forwards


def test_events_reconstruct_the_final_canvas(tiny: Transformer) -> None:
    for name in PRESETS:
        seq, evs = run(tiny, name, max_new=14)
        assert evs[-1].kind == "done" and evs[-1].middle == seq.final_middle()
        canvas = replay(evs[:-1], seq.cap, tiny.config.special.mask)
        assert canvas[: len(seq.final_middle())] == seq.final_middle()


def test_one_per_step_spends_one_forward_per_token(tiny: Transformer) -> None:
    seq, evs = run(tiny, "one_per_step", max_new=12)
    steps = [e for e in evs if e.kind == "step"]
    assert all(len(e.fills) == 1 for e in steps)
    assert seq.forwards == len(steps) == seq.cap  # budget 12 = 3 blocks of 4


def mask_column(out: torch.Tensor, mask: int) -> torch.Tensor:
    col = torch.zeros_like(out)
    col[..., mask] = 1.0
    return col


def test_threshold_zero_fills_a_block_per_forward(tiny: Transformer) -> None:
    cfg = tiny.config
    prompt = prompt_of(cfg, list(range(10, 20)), [])
    seq = Sequence(prompt, cfg.special, make_policy("threshold", threshold=0.0), cfg.block_size, 12,
                   cfg.shift_logits, max_len=512)
    # a trained model never ranks [MASK] first; this random one must be told not to
    handle = tiny.output.register_forward_hook(lambda _m, _i, out: out - 1e4 * mask_column(out, cfg.special.mask))
    try:
        decode_alone(tiny, seq)
    finally:
        handle.remove()
    assert cfg.special.mask not in seq.final_middle()
    assert seq.forwards == 3 and seq.reason == "budget" and len(seq.final_middle()) == 12


def test_stop_callback_trims(tiny: Transformer) -> None:
    cfg = tiny.config
    seq = Sequence(prompt_of(cfg, [11, 12, 13], []), cfg.special, make_policy("one_per_step"), cfg.block_size,
                   12, cfg.shift_logits, max_len=512, stop_fn=lambda toks: 3 if len(toks) >= 3 else None)
    evs = decode_alone(tiny, seq)
    assert evs[-1].reason == "stop_rule" and len(evs[-1].middle or []) == 3
    assert seq.forwards == 3  # one token per forward; nothing after the cut is decoded


def test_end_of_middle_ends_the_completion(tiny: Transformer) -> None:
    cfg = tiny.config
    eom = cfg.special.end_of_middle
    prompt = prompt_of(cfg, [11, 12, 13], [])
    seq = Sequence(prompt, cfg.special, make_policy("one_per_step"), cfg.block_size, 12, cfg.shift_logits,
                   max_len=512)
    # force the model's choice: the second generated token is end-of-middle
    orig = seq._stage

    def forced(logits: torch.Tensor, where: slice, edit_only: bool, multi: bool) -> Staged:
        if where.start == 0 and not edit_only:
            logits = logits.clone()
            logits[1, :] = -1e9
            logits[1, eom] = 1e9
        return orig(logits, where, edit_only, multi)

    seq._stage = forced  # type: ignore[method-assign]
    evs = decode_alone(tiny, seq)
    assert evs[-1].reason == "end_of_middle" and len(seq.final_middle()) == 1


def test_draft_edit_edit_passes_stop_at_fixed_point(tiny: Transformer) -> None:
    seq, evs = run(tiny, "speedy", max_new=8)
    passes = [e for e in evs if e.kind == "edit_pass"]
    limit = seq.policy.edit_passes
    # per block: passes continue only while the previous one changed something
    for i, e in enumerate(passes[:-1]):
        nxt = passes[i + 1]
        if nxt.step == e.step + 1:
            assert e.edits, "an edit pass followed one that changed nothing"
    assert len(passes) <= limit * (seq.cap // tiny.config.block_size)


def test_remask_redecodes_chosen_positions(tiny: Transformer) -> None:
    seq, _ = run(tiny, "threshold", max_new=8)
    before = seq.final_middle()
    seq.remask([5, 6], reused=0)
    assert seq.middle[5] == tiny.config.special.mask and not seq.committed[5]
    evs = decode_alone(tiny, seq)
    assert evs[-1].kind == "done"
    after = seq.final_middle()
    assert after[:4] == before[:4]  # the first block is untouched
    assert sorted(i for e in evs for i, _ in e.fills) == [5, 6]


def test_masks_after_a_committed_end_are_never_decoded(tiny: Transformer) -> None:
    cfg = tiny.config
    eom = cfg.special.end_of_middle
    seq = Sequence(prompt_of(cfg, [11, 12, 13], []), cfg.special, make_policy("threshold", threshold=0.999),
                   cfg.block_size, 4, cfg.shift_logits, max_len=512, end_ahead_min=0.0)
    orig = seq._stage

    def forced(logits: torch.Tensor, where: slice, edit_only: bool, multi: bool) -> Staged:
        logits = logits.clone() / 100.0  # nothing is confident ...
        logits[2, :] = -1e9
        logits[2, eom] = 1e9  # ... but an end-of-middle at position 2
        return orig(logits, where, edit_only, multi)

    seq._stage = forced  # type: ignore[method-assign]
    evs = decode_alone(tiny, seq)
    assert evs[0].fills == [(2, eom)]
    assert seq.forwards == 3  # positions 0 and 1, one per step; position 3 is dead
    assert evs[-1].reason == "end_of_middle" and len(seq.final_middle()) == 2


def _forced_end(seq: Sequence, eom: int, confident: tuple[int, ...]) -> None:
    """The model is sure of end-of-middle at middle position 2 and of `confident` positions."""
    orig = seq._stage

    def forced(logits: torch.Tensor, where: slice, edit_only: bool, multi: bool) -> Staged:
        logits = logits.clone() / 100.0
        for i in confident:
            logits[i, :] = -1e9
            logits[i, 20 + i] = 1e9
        logits[2, :] = -1e9
        logits[2, eom] = 1e9
        return orig(logits, where, edit_only, multi)

    seq._stage = forced  # type: ignore[method-assign]


def test_end_of_middle_commits_only_behind_committed_tokens(tiny: Transformer) -> None:
    """The default: a confident end-of-middle waits for the masks before it (committed out of
    order it would cut the answer short); the leftmost mask commits instead, so no step stalls."""
    cfg = tiny.config
    eom = cfg.special.end_of_middle
    seq = Sequence(prompt_of(cfg, [11, 12, 13], []), cfg.special, make_policy("threshold", threshold=0.999),
                   cfg.block_size, 4, cfg.shift_logits, max_len=512)
    assert seq.end_ahead_min > 1
    _forced_end(seq, eom, ())
    evs = decode_alone(tiny, seq)
    assert [i for i, _ in evs[0].fills] == [0] and [i for i, _ in evs[1].fills] == [1]
    assert evs[2].fills == [(2, eom)] and seq.forwards == 3
    assert evs[-1].reason == "end_of_middle" and len(seq.final_middle()) == 2
    # tokens committed in the same step count as committed: the end joins them at once
    seq = Sequence(prompt_of(cfg, [11, 12, 13], []), cfg.special, make_policy("threshold", threshold=0.999),
                   cfg.block_size, 4, cfg.shift_logits, max_len=512)
    _forced_end(seq, eom, (0, 1))
    evs = decode_alone(tiny, seq)
    assert sorted(evs[0].fills) == [(0, 20), (1, 21), (2, eom)] and seq.forwards == 1
    assert seq.final_middle() == [20, 21]


def test_mask_id_is_never_committed(tiny: Transformer) -> None:
    """A model that ranks [MASK] first everywhere still fills the canvas with real tokens."""
    mask = tiny.config.special.mask

    def prefer_mask(_mod: torch.nn.Module, _inp: object, out: torch.Tensor) -> torch.Tensor:
        out = out.clone()
        out[..., mask] += 1e4
        return out

    handle = tiny.output.register_forward_hook(prefer_mask)
    try:
        for name in PRESETS:
            seq, evs = run(tiny, name, max_new=12)
            assert evs[-1].kind == "done" and seq.final_middle()
            assert mask not in seq.final_middle()
            assert all(tok != mask for ev in evs for _, tok in ev.fills)
            assert all(new != mask for ev in evs for _, _, new in ev.edits)
    finally:
        handle.remove()


def test_the_preset_names_are_one_list() -> None:
    """The engine's presets are the torch-free list's names, in its order; the language server's
    `mode` option offers its MODES (not the *_multi variants nor the baselines) and the default."""
    from llada_lsp import options

    assert tuple(PRESETS) == PRESET_NAMES
    assert options.MODES is MODES and set(MODES) < set(PRESET_NAMES) and DEFAULT_PRESET in MODES
    assert options.Options().mode == DEFAULT_PRESET
    assert not any(name.endswith("_multi") for name in MODES)


def test_a_step_copies_the_forwards_rows_only_to_write_into_them(tiny: Transformer) -> None:
    """`stage` reads the forward's logits as they are when it bans nothing (every row of
    every step goes through it), and writes a ban into a copy, never into the forward's output."""
    cfg = tiny.config
    prompt = prompt_of(cfg, list(range(10, 30)), list(range(40, 45)))

    def staged(first_allowed: torch.Tensor | None) -> tuple[torch.Tensor, Staged]:
        seq = Sequence(prompt, cfg.special, make_policy("speedy"), cfg.block_size, 8, False, max_len=512,
                       first_allowed=first_allowed)
        feed = seq.prepare()
        logits = torch.randn(len(feed.logits_at), cfg.vocab_size, generator=torch.Generator().manual_seed(0))
        return logits, seq.stage(logits)

    logits, st = staged(None)
    assert st.logits.data_ptr() == logits.data_ptr() and torch.equal(st.logits, logits)
    allowed = torch.zeros(cfg.vocab_size, dtype=torch.bool)
    allowed[7] = True
    logits, st = staged(allowed)
    assert st.logits.data_ptr() != logits.data_ptr()
    assert torch.isinf(st.logits[0, 8]) and torch.isfinite(logits[0]).all()  # the ban went to the copy
