"""The KV cache of the native model and the adapters, and how a step reads and writes it.

`KVCache` holds static per-layer keys and values, [batch rows, max_len, kv_heads, head_dim].
A step writes its tokens' keys and values at their cache rows and slots, then each run of
consecutive cache rows (`row_runs`) attends over one view of the cache. A step of one row
writing consecutive slots (an editor's request decoding alone: `span_of`) writes by two slice
copies, half an index_put's cost on a CPU.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

Span = tuple[int, int] | None  # (cache row, first slot) of a one-row batch writing consecutive slots


class KVCache(nn.Module):
    """Static per-layer key/value storage, [batch, max_len, kv_heads, head_dim]."""

    k: Tensor
    v: Tensor

    def __init__(self, batch: int, max_len: int, n_kv: int, head_dim: int,
                 dtype: torch.dtype, device: torch.device | str) -> None:
        super().__init__()
        shape = (batch, max_len, n_kv, head_dim)
        self.register_buffer("k", torch.zeros(shape, dtype=dtype, device=device), persistent=False)
        self.register_buffer("v", torch.zeros(shape, dtype=dtype, device=device), persistent=False)

    def write(self, rows: Tensor, slots: Tensor, k: Tensor, v: Tensor, span: Span = None) -> None:
        """Write k/v [B, T, H, D] at cache rows `rows` [B] and slots [B, T]. With `span` (one
        row, consecutive slots: `span_of`) as two slice copies, half an index_put's cost."""
        if span is not None:
            row, first = span
            self.k[row, first : first + k.shape[1]] = k[0]
            self.v[row, first : first + v.shape[1]] = v[0]
            return
        self.k[rows[:, None], slots] = k.to(self.k.dtype)
        self.v[rows[:, None], slots] = v.to(self.v.dtype)

    def update(self, rows: Tensor, slots: Tensor, k: Tensor, v: Tensor, kv_len: int) -> tuple[Tensor, Tensor]:
        """Write k/v [B, T, H, D] at cache rows `rows` [B] and slots [B, T]; read back [B, kv_len]."""
        self.write(rows, slots, k, v)
        r0 = int(rows[0])
        if bool((rows == torch.arange(r0, r0 + rows.numel(), device=rows.device)).all()):
            # consecutive rows (the scheduler hands out the lowest free ones): a view, no copy
            return self.k[r0 : r0 + rows.numel(), :kv_len], self.v[r0 : r0 + rows.numel(), :kv_len]
        return self.k[rows, :kv_len], self.v[rows, :kv_len]


Run = tuple[int, int, int]  # batch rows [start, stop) that read cache rows first_row, first_row + 1, ...


def span_of(rows: Tensor, slots: Tensor) -> Span:
    """(cache row, first slot) when the batch is one row that writes consecutive slots (an
    editor's request decoding alone: the usual step), else None. Read once a forward, on the
    CPU only (an accelerator's index_put is one kernel, and the read would wait for it)."""
    if rows.numel() != 1 or slots.device.type != "cpu":
        return None
    s = slots[0].tolist()
    return (int(rows[0]), s[0]) if s == list(range(s[0], s[0] + len(s))) else None


def row_runs(rows: list[int]) -> list[Run]:
    """The batch split into maximal runs of consecutive cache rows, in batch order. Each run
    reads its keys and values as one view of the cache; a batch whose rows are not consecutive
    (a packed feed's second piece on the same row, a row left out of the step) would otherwise
    gather a copy of every row's keys and values in every layer (~10% of an 8-row CPU step)."""
    out: list[Run] = []
    for i, r in enumerate(rows):
        if out and r == out[-1][2] + (i - out[-1][0]):
            out[-1] = (out[-1][0], i + 1, out[-1][2])
        else:
            out.append((i, i + 1, r))
    return out
