"""Batches cut from a token bank (`engine.train.bank.TokenBank`) on the training device.

A batch is a handful of tensor operations on the device: pick a file by weight, a kind, a
candidate span of that kind in the file (a line from its code start, a few lines, a block body,
or a span of tokens anywhere), and gather suffix / prefix / middle tokens, with the cut's seam
tokens where it has them, into the suffix-first layout of `data.encode_example`;
`echo.renoise` draws the diffusion noise there too. Kinds and their weights, the size limits
and the 10% of examples without a suffix are those of `data`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from engine.model.native import CLEAN, NOISY, SpecialTokens
from engine.train.bank import CUT_FIELDS, W_HEAD, W_TAIL, Cuts, TokenBank
from engine.train.data import KIND_WEIGHTS, KINDS, MAX_MIDDLE, MAX_PREFIX, MAX_SUFFIX, Batch
from engine.train.echo import renoise

NO_SUFFIX = 0.1  # share of examples shown without their suffix (data.encode_example)
INLINE = 0.35  # share of line examples whose cursor sits inside the line (data.cut_example)
MAX_SPAN = 50  # tokens of a "span" example (data.cut_example: up to 200 characters)


@dataclass
class _Drawn:
    """Examples drawn: file, middle end, and the seam fields of `Cuts` (per example)."""

    f: torch.Tensor
    end: torch.Tensor
    pre_end: torch.Tensor
    after: torch.Tensor
    tail: torch.Tensor
    head: torch.Tensor

    def middle_len(self) -> torch.Tensor:
        return (self.head >= 0).sum(1) + self.end - self.after


class _DevCuts:
    """A `Cuts` on the device, with each file's range of rows."""

    def __init__(self, c: Cuts, n_files: int, t) -> None:  # type: ignore[no-untyped-def]
        first = np.searchsorted(c.file, np.arange(n_files), "left")
        self.first, self.count = t(first), t(np.searchsorted(c.file, np.arange(n_files), "right") - first)
        self.fields = {k: t(getattr(c, k)) for k in CUT_FIELDS if k != "file"}
        self.n = len(c.start)

    def pick(self, f: torch.Tensor, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Row indices (uniform within each file) and whether the file has any."""
        i = self.first[f] + (u * self.count[f]).long().clamp_max((self.count[f] - 1).clamp_min(0))
        return i.clamp(0, max(0, self.n - 1)), self.count[f] > 0

    def get(self, k: str, i: torch.Tensor) -> torch.Tensor:
        v = self.fields[k]
        return v[i] if self.n else torch.full((i.numel(), *v.shape[1:]), -1, dtype=torch.long, device=i.device)


class BankSampler:
    """Seeded batches of examples from a `TokenBank`, built on `device`."""

    def __init__(self, bank: TokenBank, sp: SpecialTokens, block: int, vocab: int, device: torch.device,
                 seed: int, kind_weights: tuple[float, ...] = KIND_WEIGHTS, inline: float = INLINE) -> None:
        self.sp, self.block, self.vocab, self.dev, self.inline = sp, block, vocab, device, inline
        t = lambda a: torch.as_tensor(a, device=device)  # noqa: E731
        self.ids = t(bank.ids.astype(np.int64))
        self.f_start, self.f_end = t(bank.file_start[:-1]), t(bank.file_start[1:])
        self.f_weight = t(bank.file_weight)
        self.lines, self.blocks = _DevCuts(bank.lines, bank.n_files, t), _DevCuts(bank.blocks, bank.n_files, t)
        self.kind_w = t(np.asarray(kind_weights, np.float32))
        self.gen = torch.Generator(device=device).manual_seed(seed)

    def _rand(self, n: int) -> torch.Tensor:
        return torch.rand(n, generator=self.gen, device=self.dev)

    def draw(self, n: int) -> _Drawn:
        """n examples, every one valid (a middle of 1 to MAX_MIDDLE - 1 tokens): candidates are
        drawn for all, and the misses drawn again."""
        out: _Drawn | None = None
        todo = torch.arange(n, device=self.dev)
        for _ in range(100):
            if todo.numel() == 0:
                assert out is not None
                return out
            d, valid = self._draw(todo.numel())
            m = d.middle_len()
            ok = valid & (m >= 1) & (m + 1 <= MAX_MIDDLE)
            if out is None:
                out = _Drawn(*(torch.zeros((n, *v.shape[1:]), dtype=v.dtype, device=self.dev)
                               for v in vars(d).values()))
            for k, v in vars(d).items():
                getattr(out, k)[todo[ok]] = v[ok]
            todo = todo[~ok]
        raise RuntimeError("token bank: no valid examples (too few lines or blocks?)")

    def _draw(self, n: int) -> tuple[_Drawn, torch.Tensor]:
        f = torch.multinomial(self.f_weight, n, replacement=True, generator=self.gen)
        kind = torch.multinomial(self.kind_w, n, replacement=True, generator=self.gen)
        L, B = self.lines, self.blocks
        li, has_line = L.pick(f, self._rand(n))
        ls, le = L.get("start", li), L.get("end", li)
        # multi_line: 2-6 lines from there, ending at the last one's newline
        k = torch.randint(2, 7, (n,), generator=self.gen, device=self.dev)
        last = torch.minimum(li + k - 1, L.first[f] + L.count[f] - 1).clamp(0, max(0, L.n - 1))
        bi, has_block = B.pick(f, self._rand(n))
        # line, with the cursor (INLINE) on a token boundary inside it: no seam there
        c = torch.minimum(ls + (self._rand(n) * (le - ls).clamp_min(0)).long(), (le - 1).clamp_min(ls))
        inside = (self._rand(n) < self.inline) & (c > ls)
        # span: 1 to MAX_SPAN tokens anywhere in the file
        length = self.f_end[f] - self.f_start[f]
        sp_s = self.f_start[f] + (self._rand(n) * (length - 1).clamp_min(0)).long()
        sp_e = torch.minimum(sp_s + torch.randint(1, MAX_SPAN + 1, (n,), generator=self.gen, device=self.dev),
                             self.f_end[f])
        is_line, is_multi = kind == KINDS.index("line"), kind == KINDS.index("multi_line")
        is_block, is_span = kind == KINDS.index("block"), kind == KINDS.index("span")
        plain = is_span | (is_line & inside)  # cuts on whole-text token boundaries

        def seam(name: str) -> torch.Tensor:
            v = torch.where(is_block.view(-1, *[1] * (L.get(name, li).dim() - 1)), B.get(name, bi), L.get(name, li))
            return v

        cut = torch.where(is_span, sp_s, c)
        pre_end = torch.where(plain, cut, seam("pre_end"))
        after = torch.where(plain, cut, seam("after"))
        tail = torch.where(plain[:, None], -1, seam("tail"))
        head = torch.where(plain[:, None], -1, seam("head"))
        end = torch.where(is_span, sp_e, torch.where(is_block, B.get("end", bi),
                                                     torch.where(is_multi, L.get("end", last), le)))
        valid = torch.where(is_block, has_block, torch.where(is_span, length > 1, has_line & (le > ls)))
        return _Drawn(f, end, pre_end, after, tail, head), valid

    def batch(self, n: int, diffusion: bool) -> Batch:
        """`n` examples in the layout of `data.make_batch` (no attention mask: `attach_mask`)."""
        sp, block, dev = self.sp, self.block, self.dev
        d = self.draw(n)
        n_tail, n_head = (d.tail >= 0).sum(1), (d.head >= 0).sum(1)
        n_pre = torch.minimum(d.pre_end - self.f_start[d.f], MAX_PREFIX - n_tail)
        n_suf = torch.minimum(self.f_end[d.f] - d.end, torch.full_like(n_tail, MAX_SUFFIX))
        n_suf = torch.where(self._rand(n) < NO_SUFFIX, torch.zeros_like(n_suf), n_suf)
        n_mid = d.middle_len() + 1  # with the end-of-middle token
        M = (n_mid + block - 1) // block * block
        P = n_suf + n_pre + n_tail + 3  # <fim_suffix> suffix <fim_prefix> prefix tail <fim_middle>
        L = P + M
        T = int(L.max())
        N = int(M.max()) if diffusion else 0
        col = lambda x: x[:, None]  # noqa: E731
        j = torch.arange(T, device=dev)[None].expand(n, T)
        a_pre = col(n_suf) + 2  # index of the first prefix token
        a_tail = a_pre + col(n_pre)
        src = torch.where(j <= col(n_suf), col(d.end) + j - 1,
                          torch.where(j < a_tail, col(d.pre_end - n_pre) + j - a_pre,
                                      col(d.after) + j - col(P + n_head)))
        idx = self.ids[src.clamp(0, self.ids.numel() - 1)]
        tail = d.tail.gather(1, (j - a_tail).clamp(0, W_TAIL - 1))
        head = d.head.gather(1, (j - col(P)).clamp(0, W_HEAD - 1))
        idx = torch.where((j >= a_tail) & (j < col(P) - 1), tail, idx)
        idx = torch.where((j >= col(P)) & (j < col(P + n_head)), head, idx)
        idx = torch.where(j == 0, sp.fim_suffix, torch.where(j == col(n_suf) + 1, sp.fim_prefix,
                          torch.where(j == col(P) - 1, sp.fim_middle, idx)))
        idx = torch.where(j - col(P) >= col(n_mid) - 1, sp.end_of_middle, idx)
        live = j < col(L)
        idx = torch.where(live, idx, sp.pad)
        ar_t = torch.full((n, T), -100, dtype=torch.long, device=dev)
        ar_t[:, :-1] = torch.where(live[:, 1:], idx[:, 1:], -100)
        ar_w = live[:, 1:].float()
        ar_w = torch.cat([torch.where(j[:, :-1] >= col(P) - 1, 2.0 * ar_w, ar_w), torch.zeros(n, 1, device=dev)], 1)
        pos = torch.where(live, j, 0)
        kind = torch.where(live, CLEAN, 0)
        blk = torch.full((n, T + N), -1, dtype=torch.long, device=dev)
        nz_t = torch.full((n, N), -100, dtype=torch.long, device=dev)
        if N:
            q = torch.arange(N, device=dev)[None].expand(n, N)
            in_mid = q < col(M)
            clean_mid = idx.gather(1, (col(P) + q).clamp_max(T - 1))
            nz_t[:, :-1] = torch.where(in_mid[:, 1:] & ((q[:, 1:] % block) != 0), clean_mid[:, 1:], -100)
            idx = torch.cat([idx, torch.where(in_mid, clean_mid, sp.pad)], 1)
            pos = torch.cat([pos, torch.where(in_mid, col(P) + q, 0)], 1)
            kind = torch.cat([kind, torch.where(in_mid, NOISY, 0)], 1)
            blk[:, T:] = torch.where(in_mid, col(P) + q // block * block, -1)
        out = Batch(idx, pos, kind, blk, None, ar_t, ar_w, nz_t, torch.zeros(nz_t.shape, device=dev), T)
        return renoise(out, self.gen, sp.mask, self.vocab, block) if N else out
