"""The step's attention mask built where the model lives (engine.decoding.batch.device_mask), against
the host-side recipe it replaced: layout_mask, then each padding query given slot 0."""

from __future__ import annotations

from typing import Any, cast

import pytest
import torch

from engine.api import CompletionRequest, Plan
from engine.decoding import batch
from engine.decoding.batch import device_mask, sees_every_key, to_device
from engine.decoding.steps import Feed
from engine.model.native import CLEAN, INVALID, NOISY, Transformer, layout_mask, preset
from engine.service import TextEngine

PROMPTS = [("def area(width, height):\n    return ", "\n"),
           ("import os\n\n\ndef list_files(path):\n    ", "\n\nprint(list_files('.'))\n"),
           ("class Stack:\n    def __init__(self):\n        self.items = []\n\n    def push(self, x):\n        ", "\n")]


def host_mask(qk: torch.Tensor, pos: torch.Tensor, qb: torch.Tensor, keys: torch.Tensor, lens: list[int],
              bidirectional: bool) -> torch.Tensor:
    mask = layout_mask(qk, pos, qb, keys[:, 0], keys[:, 1], keys[:, 2], bidirectional=bidirectional)
    for r, n in enumerate(lens):
        mask[r, 0, n:, 0] = True
    return mask


def ragged_step(seed: int) -> tuple[torch.Tensor, ...]:
    """Three rows of 5, 3 and 8 queries (padded to 8) over 20 slots: clean prefix, noisy block."""
    g = torch.Generator().manual_seed(seed)
    B, T, S = 3, 8, 20
    kinds = torch.tensor([INVALID, CLEAN, NOISY])
    qk = kinds[torch.randint(1, 3, (B, T), generator=g)]
    pos = torch.randint(0, S, (B, T), generator=g)
    qb = torch.where(qk == NOISY, (pos // 4) * 4, -1)
    keys = torch.stack([kinds[torch.randint(0, 3, (B, S), generator=g)],
                        torch.arange(S).expand(B, S), (torch.arange(S) // 4 * 4).expand(B, S)], dim=1)
    lens = torch.tensor([5, 3, 8])
    qk[torch.arange(T)[None, :] >= lens[:, None]] = INVALID
    return qk, pos, qb, keys, lens


def test_device_mask_equals_the_host_recipe() -> None:
    for seed in range(4):
        qk, pos, qb, keys, lens = ragged_step(seed)
        for bidir in (False, True):
            want = host_mask(qk, pos, qb, keys, lens.tolist(), bidir)
            got = device_mask(qk, pos, qb, keys, lens, bidir)
            assert got.shape == (3, 1, 8, 20) and torch.equal(got, want)
            assert bool(got[1, 0, 3:, 0].all())  # padding queries read slot 0: no empty softmax row


def test_to_device_keeps_every_tensor_whole_and_in_order() -> None:
    parts = [torch.arange(6).view(2, 3), torch.tensor([7]), torch.zeros(2, 0, dtype=torch.long),
             torch.arange(24).view(2, 3, 4)]
    cpu = to_device(parts, torch.device("cpu"))
    assert all(a is b for a, b in zip(cpu, parts, strict=True))  # the CPU needs no copy
    meta = to_device(parts, torch.device("meta"))  # one flat copy, cut back into views
    assert [t.shape for t in meta] == [t.shape for t in parts] and all(t.is_meta for t in meta)


def one_block(s: int, n: int) -> tuple[Feed, torch.Tensor]:
    """A noisy block of n at position s over s clean slots (a one-row decode step), and its
    cache row's slot attributes [1, 3, s + n] (kind, pos, block start)."""
    f = Feed.empty()
    for i in range(n):
        f.add(7, s + i, s + i, NOISY, s)
    f.logits_at, f.kv_len = list(range(n)), s + n
    slot = torch.arange(s + n)
    keys = torch.stack([torch.where(slot < s, CLEAN, NOISY), slot.clone(), torch.where(slot < s, -1, s)])
    return f, keys[None]


def mask_of(f: Feed, keys: torch.Tensor) -> torch.Tensor:
    q = [torch.tensor([x]) for x in (f.kind, f.pos, f.blk)]
    return device_mask(q[0], q[1], q[2], keys, torch.tensor([len(f.ids)]), False)


def test_a_mask_that_hides_nothing_is_not_built() -> None:
    """`sees_every_key` says yes only where the mask it saves would be all True, and only for the
    native model (which drops such a mask itself on the CPU)."""
    model = Transformer(preset("test-tiny"))
    f, keys = one_block(12, 4)
    assert sees_every_key(model, [f], 1, 4, keys) and bool(mask_of(f, keys).all())
    f0, keys0 = one_block(0, 4)  # a block with no clean prefix
    assert sees_every_key(model, [f0], 1, 4, keys0) and bool(mask_of(f0, keys0).all())
    hole = keys.clone()
    hole[0, 0, 5] = INVALID  # a slot of the prefix never written
    late = keys.clone()
    late[0, 1, 3] = 12  # a clean key at the block's own position
    for k in (hole, late):
        assert not sees_every_key(model, [f], 1, 4, k) and not bool(mask_of(f, k).all())
    tail, tkeys = one_block(12, 4)  # the prompt's tail fed with the block: clean queries are causal
    tail.kind[0], tail.blk[0] = CLEAN, -1
    tkeys[0, 0, 12], tkeys[0, 2, 12] = CLEAN, -1
    assert not sees_every_key(model, [tail], 1, 4, tkeys) and not bool(mask_of(tail, tkeys).all())
    assert not sees_every_key(model, [f, f], 2, 4, torch.cat([keys, keys]))  # two rows: built
    assert not sees_every_key(model, [f], 1, 8, keys)  # padded to 8 queries
    assert not sees_every_key(cast(Transformer, object()), [f], 1, 4, keys)  # an adapter's model


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_decoding_without_the_all_visible_mask_gives_the_same_logits(monkeypatch: pytest.MonkeyPatch,
                                                                     dtype: torch.dtype) -> None:
    """The embedded model's one-row steps skip the mask (`sees_every_key`), and every forward's
    logits are the same bits as with the mask built, in float32 and in bfloat16."""
    eng = TextEngine(threads=1, dtype=dtype)
    assert next(eng.model.parameters()).dtype == dtype
    taken = []
    real = batch.sees_every_key

    def counted(*a: Any) -> bool:
        taken.append(real(*a))
        return taken[-1]

    def run(decide: Any) -> list[torch.Tensor]:
        monkeypatch.setattr(batch, "sees_every_key", decide)
        out: list[torch.Tensor] = []
        forward = eng.model.forward

        def recorded(*a: Any, **k: Any) -> torch.Tensor:
            out.append(forward(*a, **k).clone())
            return out[-1]

        monkeypatch.setattr(eng.model, "forward", recorded)
        for i, (prefix, suffix) in enumerate(PROMPTS):
            req = CompletionRequest(f"r{i}{len(taken)}", f"d{i}.py", prefix, suffix, Plan(max_tokens=24, max_lines=2))
            for _ in eng.complete(req):
                pass
        eng.prompt_cache.clear()
        monkeypatch.undo()
        return out

    skipped, built = run(counted), run(lambda *a: False)
    assert sum(taken) > len(PROMPTS) and not all(taken)  # skipped in most decode steps, not in all
    assert len(skipped) == len(built) and all(torch.equal(a, b) for a, b in zip(skipped, built, strict=True))
