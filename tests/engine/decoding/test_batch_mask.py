"""The step's attention mask built where the model lives (engine.decoding.batch.device_mask), against
the host-side recipe it replaced: layout_mask, then each padding query given slot 0."""

from __future__ import annotations

import torch

from engine.decoding.batch import device_mask, to_device
from engine.model.native import CLEAN, INVALID, NOISY, layout_mask


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
