"""A token bank: fill-in-the-middle batches cut on the training device itself.

On a lent GPU the host's cores, not the GPU, set the pace of `data.ExampleStream` (BENCHMARKS.md,
"A lent GPU": 74% of a run waited for examples). The bank moves the cutting to the device: every
training file is tokenized once, whole, and its cut points are found once (each line's code
start and end, each block body of the syntax tree, as token indices). A batch is then a handful
of tensor operations on the device: pick a file by weight, a kind, a candidate span of that kind
in the file, and gather suffix / prefix / middle tokens into the suffix-first layout of
`data.encode_example`; `echo.renoise` draws the diffusion noise there too.

The one difference from `ExampleStream`: prefix, middle and suffix are slices of the file's
whole tokenization, so a cut falls on a token boundary of the whole text (a middle after
indentation starts with the token that carries the last indent space and the first word).
That is the text the engine's token healing presents at a cursor, so both stream kinds teach
the same task. Kinds and their weights, the size limits and the 10% of examples without a
suffix are those of `data`.
"""

from __future__ import annotations

import time
import io
import lzma
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from tokenizers import Tokenizer
from tree_sitter import Parser

from engine.model import CLEAN, NOISY, SpecialTokens
from engine.train.data import (KIND_WEIGHTS, KINDS, MAX_MIDDLE, MAX_PREFIX, MAX_SUFFIX, PY, Batch, Encoded,
                              block_spans)
from engine.train.echo import renoise

NO_SUFFIX = 0.1  # share of examples shown without their suffix (data.encode_example)
INLINE = 0.35  # share of line examples whose cursor sits inside the line (data.cut_example)
MAX_SPAN = 50  # tokens of a "span" example (data.cut_example: up to 200 characters)
_BLANK = np.asarray([ord(c) for c in " \t\f\r"], dtype=np.uint32)  # indentation, not code
FIELDS = ("ids", "file_start", "file_weight", "line_start", "line_end", "line_file",
          "block_start", "block_end", "block_file")


@dataclass
class TokenBank:
    """Whole-file tokens and cut points, as flat arrays (token indices into `ids`)."""

    ids: np.ndarray  # int32 [tokens]: every file's tokens, one after another
    file_start: np.ndarray  # int64 [files + 1]: file f is ids[file_start[f]:file_start[f + 1]]
    file_weight: np.ndarray  # float32 [files]
    line_start: np.ndarray  # int64 [lines]: the token holding each line's first code character
    line_end: np.ndarray  # int64 [lines]: the token that starts at the line's newline (or file
    # end); a blank line's end is its start: no line example, no multi-line one from there
    line_file: np.ndarray  # int64 [lines], files in order, lines in order within a file
    block_start: np.ndarray  # int64 [blocks]: block bodies of compound statements
    block_end: np.ndarray
    block_file: np.ndarray
    held: list[Encoded] = field(default_factory=list)  # the held-out rows the trainer evaluates on

    @classmethod
    def build(cls, texts: list[str], weights: list[float], tok: Tokenizer) -> TokenBank:
        parser = Parser(PY)
        encs = tok.encode_batch(texts)
        ids, starts, lines, blocks = [], [0], ([], [], []), ([], [], [])
        for f, (text, enc) in enumerate(zip(texts, encs, strict=True)):
            base = starts[-1]
            ids.append(np.asarray(enc.ids, dtype=np.int32))
            starts.append(base + len(enc.ids))
            tok_at = np.asarray([s for s, _ in enc.offsets], dtype=np.int64)  # char offset of each token
            chars = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
            nl = np.flatnonzero(chars == 10)
            line_begin = np.concatenate([[0], nl + 1])
            line_stop = np.concatenate([nl, [len(text)]])
            code = np.flatnonzero(~np.isin(chars, _BLANK))  # the first code character of each line
            at = np.searchsorted(code, line_begin)
            first = np.where(at < len(code), code[np.minimum(at, len(code) - 1)] if len(code) else 0, line_stop)
            first = np.minimum(first, line_stop)
            s = np.searchsorted(tok_at, first, "right") - 1  # the token that holds the character
            e = np.searchsorted(tok_at, line_stop, "left")  # the first token at or after the newline
            s = np.maximum(s, 0)
            e = np.where(first < line_stop, e, s)  # a blank line: an empty candidate
            lines[0].append(base + s)
            lines[1].append(base + e)
            lines[2].append(np.full(len(s), f))
            spans = block_spans(text, parser.parse(text.encode("utf-8")).root_node)
            if spans:
                bs = np.searchsorted(tok_at, [b.start for b in spans], "right") - 1
                be = np.searchsorted(tok_at, [b.end for b in spans], "left")
                blocks[0].append(base + np.maximum(bs, 0))
                blocks[1].append(base + be)
                blocks[2].append(np.full(len(spans), f))

        def cat(parts: list[np.ndarray]) -> np.ndarray:
            return np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, np.int64)

        return cls(np.concatenate(ids), np.asarray(starts, np.int64), np.asarray(weights, np.float32),
                   *(cat(p) for p in lines), *(cat(p) for p in blocks))

    def save(self, path: Path) -> None:
        """An xz-compressed .npz, ids as uint16 and indices as int32 (the standard library's
        bank is ~5 MB: small enough to carry to a lent GPU)."""
        if len(self.ids) >= 2**31 or int(self.ids.max(initial=0)) >= 2**16:
            raise ValueError("token bank too large for its file format")
        arrays = {k: getattr(self, k) for k in FIELDS}
        arrays = {k: (v.astype(np.uint16) if k == "ids" else v.astype(np.int32) if v.dtype == np.int64 else v)
                  for k, v in arrays.items()}
        raw = io.BytesIO()
        np.savez(raw, **arrays, **{f"held_{k}": v for k, v in _pack_rows(self.held).items()})
        path.write_bytes(lzma.compress(raw.getvalue(), preset=6))

    @classmethod
    def load(cls, path: Path) -> TokenBank:
        with np.load(io.BytesIO(lzma.decompress(path.read_bytes()))) as z:
            arrays = {k: z[k].astype(np.float32 if k == "file_weight" else np.int64) for k in FIELDS}
            held = _unpack_rows({k[5:]: z[k] for k in z.files if k.startswith("held_")})
        return cls(**arrays, held=held)

    @property
    def n_files(self) -> int:
        return len(self.file_weight)


def _pack_rows(rows: list[Encoded]) -> dict[str, np.ndarray]:
    return {"ids": np.asarray([t for r in rows for t in r.ids], np.int32),
            "len": np.asarray([len(r.ids) for r in rows], np.int32),
            "prompt": np.asarray([r.prompt_len for r in rows], np.int32),
            "middle": np.asarray([r.middle_len for r in rows], np.int32)}


def _unpack_rows(a: dict[str, np.ndarray]) -> list[Encoded]:
    if not a:
        return []
    ends = np.cumsum(a["len"])
    return [Encoded(a["ids"][e - n: e].tolist(), int(p), int(m))
            for e, n, p, m in zip(ends, a["len"], a["prompt"], a["middle"], strict=True)]


def _ranges(owner: np.ndarray, n_files: int) -> tuple[np.ndarray, np.ndarray]:
    """Per file, the first index and the count of the rows it owns (rows sorted by file)."""
    first = np.searchsorted(owner, np.arange(n_files), "left")
    return first, np.searchsorted(owner, np.arange(n_files), "right") - first


class BankSampler:
    """Seeded batches of examples from a `TokenBank`, built on `device`."""

    def __init__(self, bank: TokenBank, sp: SpecialTokens, block: int, vocab: int,
                 device: torch.device, seed: int) -> None:
        self.sp, self.block, self.vocab, self.dev = sp, block, vocab, device
        t = lambda a: torch.as_tensor(a, device=device)  # noqa: E731
        self.ids = t(bank.ids.astype(np.int64))
        self.f_start, self.f_end = t(bank.file_start[:-1]), t(bank.file_start[1:])
        self.f_weight = t(bank.file_weight)
        self.l_start, self.l_end = t(bank.line_start), t(bank.line_end)
        self.b_start, self.b_end = t(bank.block_start), t(bank.block_end)
        lf, lc = _ranges(bank.line_file, bank.n_files)
        bf, bc = _ranges(bank.block_file, bank.n_files)
        self.l_first, self.l_count = t(lf), t(lc)
        self.b_first, self.b_count = t(bf), t(bc)
        self.kind_w = t(np.asarray(KIND_WEIGHTS, np.float32))
        self.gen = torch.Generator(device=device).manual_seed(seed)

    def _rand(self, n: int) -> torch.Tensor:
        return torch.rand(n, generator=self.gen, device=self.dev)

    def spans(self, n: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """n (file, middle start, middle end) triples, every one valid (1 to MAX_MIDDLE - 1
        tokens): candidates are drawn for all, and the misses drawn again."""
        f = torch.zeros(n, dtype=torch.long, device=self.dev)
        s, e = torch.zeros_like(f), torch.zeros_like(f)
        todo = torch.arange(n, device=self.dev)
        for _ in range(100):
            if todo.numel() == 0:
                return f, s, e
            ff, ss, ee = self._draw(todo.numel())
            ok = (ee > ss) & (ee - ss + 1 <= MAX_MIDDLE)
            f[todo[ok]], s[todo[ok]], e[todo[ok]] = ff[ok], ss[ok], ee[ok]
            todo = todo[~ok]
        raise RuntimeError("token bank: no valid examples (too few lines or blocks?)")

    def _draw(self, n: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        f = torch.multinomial(self.f_weight, n, replacement=True, generator=self.gen)
        kind = torch.multinomial(self.kind_w, n, replacement=True, generator=self.gen)
        u = self._rand(n)
        # line: one line, the cursor at its code start or (INLINE) anywhere inside it
        li = self.l_first[f] + (u * self.l_count[f]).long().clamp_max((self.l_count[f] - 1).clamp_min(0))
        li = li.clamp(0, max(0, self.l_start.numel() - 1))
        has_line = self.l_count[f] > 0
        ls, le = self.l_start[li], self.l_end[li]
        inside = self._rand(n) < INLINE
        ls_in = ls + (self._rand(n) * (le - ls).clamp_min(0)).long()
        line_s = torch.where(inside, torch.minimum(ls_in, (le - 1).clamp_min(ls)), ls)
        # multi_line: 2-6 lines from there, ending at the last one's newline
        k = torch.randint(2, 7, (n,), generator=self.gen, device=self.dev)
        last = torch.minimum(li + k - 1, self.l_first[f] + self.l_count[f] - 1).clamp_min(0)
        last = last.clamp_max(max(0, self.l_end.numel() - 1))
        multi_e = self.l_end[last]
        # block: a block body
        bi = self.b_first[f] + (self._rand(n) * self.b_count[f]).long().clamp_max((self.b_count[f] - 1).clamp_min(0))
        bi = bi.clamp(0, max(0, self.b_start.numel() - 1))
        has_block = self.b_count[f] > 0
        # span: 1 to MAX_SPAN tokens anywhere in the file
        length = self.f_end[f] - self.f_start[f]
        sp_s = self.f_start[f] + (self._rand(n) * (length - 1).clamp_min(0)).long()
        sp_e = torch.minimum(sp_s + torch.randint(1, MAX_SPAN + 1, (n,), generator=self.gen, device=self.dev),
                             self.f_end[f])
        starts = torch.stack([line_s, ls, self.b_start[bi] if self.b_start.numel() else ls, sp_s])
        ends = torch.stack([le, multi_e, self.b_end[bi] if self.b_end.numel() else ls, sp_e])
        pick = kind[None]
        s, e = starts.gather(0, pick)[0], ends.gather(0, pick)[0]
        valid = torch.where(kind == KINDS.index("block"), has_block, torch.where(kind == KINDS.index("span"),
                                                                                 length > 1, has_line & (le > ls)))
        e = torch.where(valid, e, s)  # an empty middle: drawn again
        return f, s, e

    def batch(self, n: int, diffusion: bool) -> Batch:
        """`n` examples in the layout of `data.make_batch` (no attention mask: `attach_mask`)."""
        sp, block, dev = self.sp, self.block, self.dev
        f, s, e = self.spans(n)
        n_pre = torch.minimum(s - self.f_start[f], torch.tensor(MAX_PREFIX, device=dev))
        n_suf = torch.minimum(self.f_end[f] - e, torch.tensor(MAX_SUFFIX, device=dev))
        n_suf = torch.where(self._rand(n) < NO_SUFFIX, torch.zeros_like(n_suf), n_suf)
        n_mid = e - s + 1  # with the end-of-middle token
        M = (n_mid + block - 1) // block * block
        P = n_suf + n_pre + 3  # <fim_suffix> suffix <fim_prefix> prefix <fim_middle>
        L = P + M
        T = int(L.max())
        N = int(M.max()) if diffusion else 0
        j = torch.arange(T, device=dev)[None].expand(n, T)
        a_pre = n_suf[:, None] + 2  # index of the first prefix token
        src = torch.where(j <= n_suf[:, None], e[:, None] + j - 1,
                          torch.where(j < a_pre + n_pre[:, None], s[:, None] - n_pre[:, None] + j - a_pre,
                                      s[:, None] + j - P[:, None]))
        toks = self.ids[src.clamp(0, self.ids.numel() - 1)]
        mid_j = j - P[:, None]
        idx = torch.where(j == 0, sp.fim_suffix, torch.where(j == n_suf[:, None] + 1, sp.fim_prefix,
                          torch.where(j == P[:, None] - 1, sp.fim_middle, toks)))
        idx = torch.where(mid_j >= n_mid[:, None] - 1, sp.end_of_middle, idx)
        live = j < L[:, None]
        idx = torch.where(live, idx, sp.pad)
        ar_t = torch.full((n, T), -100, dtype=torch.long, device=dev)
        ar_t[:, :-1] = torch.where(live[:, 1:], idx[:, 1:], -100)
        ar_w = live[:, 1:].float()
        ar_w = torch.cat([torch.where(j[:, :-1] >= P[:, None] - 1, 2.0 * ar_w, ar_w),
                          torch.zeros(n, 1, device=dev)], 1)
        pos = torch.where(live, j, 0)
        kind = torch.where(live, CLEAN, 0)
        blk = torch.full((n, T + N), -1, dtype=torch.long, device=dev)
        if N:
            q = torch.arange(N, device=dev)[None].expand(n, N)
            in_mid = q < M[:, None]
            clean_mid = idx.gather(1, (P[:, None] + q).clamp_max(T - 1))
            nz_t = torch.full((n, N), -100, dtype=torch.long, device=dev)
            nz_t[:, :-1] = torch.where(in_mid[:, 1:] & ((q[:, 1:] % block) != 0), clean_mid[:, 1:], -100)
            idx = torch.cat([idx, torch.where(in_mid, clean_mid, sp.pad)], 1)
            pos = torch.cat([pos, torch.where(in_mid, P[:, None] + q, 0)], 1)
            kind = torch.cat([kind, torch.where(in_mid, NOISY, 0)], 1)
            blk[:, T:] = torch.where(in_mid, P[:, None] + q // block * block, -1)
        else:
            nz_t = torch.full((n, 0), -100, dtype=torch.long, device=dev)
        out = Batch(idx, pos, kind, blk, None, ar_t, ar_w, nz_t, torch.zeros(nz_t.shape, device=dev), T)
        return renoise(out, self.gen, sp.mask, self.vocab, block) if N else out


def main() -> None:
    """Build the bank of the training split (the trainer's files and weights), with the
    trainer's 32 held-out rows, into a file."""
    import argparse

    from engine.tokenizer import load_tokenizer
    from engine.train.corpus import read_text, split

    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("out", type=Path)
    ap.add_argument("--tokenizer", type=Path, default=Path("engine/checkpoints/tiny-code"))
    ap.add_argument("--stdlib-only", action="store_true", help="the standard library's files only")
    ap.add_argument("--block", type=int, default=16, help="the model's diffusion block (held-out rows)")
    args = ap.parse_args()
    t0 = time.perf_counter()
    tok = load_tokenizer(args.tokenizer)
    train, held = split()
    texts, weights = [], []
    for f in train:
        if args.stdlib_only and not f.key.startswith("stdlib/"):
            continue
        if (t := read_text(f)) is not None and t.strip():
            texts.append(t)
            weights.append(2.0 if f.key.startswith("stdlib/") else 1.0)
    bank = TokenBank.build(texts, weights, tok)
    bank.held = held_rows(tok, [t for f in held if f.key.startswith("stdlib/") and (t := read_text(f))], args.block)
    bank.save(args.out)
    print(f"{bank.n_files} files, {len(bank.ids) / 1e6:.2f}M tokens, {len(bank.line_start)} lines, "
          f"{len(bank.block_start)} blocks, {len(bank.held)} held-out rows, {args.out.stat().st_size / 1e6:.1f} MB, "
          f"{time.perf_counter() - t0:.1f} s")


def held_rows(tok: Tokenizer, held_texts: list[str], block: int, n: int = 32) -> list[Encoded]:
    """The trainer's fixed held-out rows (engine.train.train: the same seed and count)."""
    from engine.tokenizer import special_tokens_of
    from engine.train.data import ExampleStream

    stream = ExampleStream(held_texts, [1.0] * len(held_texts), tok, special_tokens_of(tok), block, seed=1234)
    return [stream.next() for _ in range(n)]


if __name__ == "__main__":
    main()
