"""A token bank: fill-in-the-middle batches cut on the training device itself.

On a lent GPU the host's cores, not the GPU, set the pace of `data.ExampleStream` (BENCHMARKS.md,
"A lent GPU": 74% of a run waited for examples). The bank moves the cutting to the device: every
training file is tokenized once, whole, and its cut points are found once (each line's code
start and end, each block body of the syntax tree, as token indices). A batch is then a handful
of tensor operations on the device: pick a file by weight, a kind, a candidate span of that kind
in the file, and gather suffix / prefix / middle tokens into the suffix-first layout of
`data.encode_example`; `echo.renoise` draws the diffusion noise there too.

Seams. The engine tokenizes the prefix on its own, so a prefix that ends in indentation ends
in one whitespace token ("\n" and all the spaces), and the middle starts with the bare word.
Cut from the whole file's tokens, the same place falls inside a token: byte-level BPE puts the
last indentation space in front of the word (" def"), and splits a run of blank lines before
unindented code differently (two newline tokens against one). Session 18 trained on such cuts and the
model got worse at exactly those prompts (BENCHMARKS.md), so every cut at a code start carries
its seam: the whitespace before it tokenized alone (the prefix's last tokens) and the rest of
the word it splits tokenized alone (the middle's first tokens; BPE merges within a word, so
" expand" and "expand" can split differently), found once when the bank is built. A cut elsewhere inside a line falls on a token boundary of the whole text, as the
engine's token healing presents a word fragment at the cursor. Kinds and their weights, the
size limits and the 10% of examples without a suffix are those of `data`.
"""

from __future__ import annotations

import io
import lzma
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from tokenizers import Tokenizer
from tree_sitter import Parser

from engine.model.native import CLEAN, NOISY, SpecialTokens
from engine.train.data import (
    KIND_WEIGHTS,
    KINDS,
    MAX_MIDDLE,
    MAX_PREFIX,
    MAX_SUFFIX,
    PY,
    Batch,
    Encoded,
    block_spans,
)
from engine.train.echo import renoise

NO_SUFFIX = 0.1  # share of examples shown without their suffix (data.encode_example)
INLINE = 0.35  # share of line examples whose cursor sits inside the line (data.cut_example)
MAX_SPAN = 50  # tokens of a "span" example (data.cut_example: up to 200 characters)
W_TAIL, W_HEAD = 6, 8  # a seam's tokens at most (longer ones: the cut stays whole-text)
_BLANK = np.asarray([ord(c) for c in " \t\f\r"], dtype=np.uint32)  # indentation, not code
_SPACE = np.asarray([ord(c) for c in " \t\n\r\f\v"], dtype=np.uint32)
CUT_FIELDS = ("start", "end", "file", "pre_end", "after", "tail", "head")
FIELDS = ("ids", "file_start", "file_weight", *(f"{k}_{f}" for k in ("line", "block") for f in CUT_FIELDS))


@dataclass
class Cuts:
    """Middles of one kind (token indices into the bank's ids) with their seams."""

    start: np.ndarray  # int64 [n]: the token holding the cut's first character
    end: np.ndarray  # int64 [n]: the first token after the middle (a blank line's end is its start)
    file: np.ndarray  # int64 [n], sorted
    pre_end: np.ndarray  # int64 [n]: the prefix's whole-text tokens end here (start without a seam)
    after: np.ndarray  # int64 [n]: the middle's whole-text tokens start here (after the word that
    # a split seam re-tokenizes)
    tail: np.ndarray  # int64 [n, W_TAIL]: the prefix's seam tokens, -1 padded
    head: np.ndarray  # int64 [n, W_HEAD]: the middle's seam tokens, -1 padded

    @classmethod
    def concat(cls, parts: list[Cuts]) -> Cuts:
        if not parts:
            return cls(*(np.zeros(0, np.int64),) * 5, np.zeros((0, W_TAIL), np.int64), np.zeros((0, W_HEAD), np.int64))
        return cls(*(np.concatenate([getattr(p, k) for p in parts]) for k in CUT_FIELDS))


class _Seams:
    """The seams of cuts at given characters of one text (`tok_at`: each token's first character)."""

    def __init__(self, tok: Tokenizer) -> None:
        self.tok, self.memo = tok, {}  # type: ignore[var-annotated]

    def _enc(self, text: str, width: int) -> list[int] | None:
        ids = self.memo.get(text)
        if ids is None:
            ids = self.memo[text] = self.tok.encode(text).ids
        return ids if len(ids) <= width else None

    def cuts(self, text: str, chars: np.ndarray, tok_at: np.ndarray, word_end: np.ndarray, at: np.ndarray,
             end: np.ndarray, base: int, f: int) -> Cuts:
        """`word_end`: the end of the pre-token (BPE's unit) that holds each character."""
        n_tok = len(tok_at)
        s = np.maximum(np.searchsorted(tok_at, at, "right") - 1, 0)  # the token holding character `at`
        pre_end, after = s.copy(), s.copy()
        tail = np.full((len(at), W_TAIL), -1, np.int64)
        head = np.full((len(at), W_HEAD), -1, np.int64)
        nonspace = np.flatnonzero(~np.isin(chars, _SPACE))
        k = np.searchsorted(nonspace, at) - 1
        ws = np.where(k >= 0, nonspace[np.maximum(k, 0)] + 1 if len(nonspace) else 0, 0)  # the whitespace run
        for i in np.flatnonzero((ws < at) & (end > s)):  # a prefix that ends in whitespace
            a = int(np.searchsorted(tok_at, ws[i], "left"))
            if a >= n_tok or tok_at[a] != ws[i]:
                continue
            split = tok_at[s[i]] < at[i]  # a token runs across the cut: the word it is in is split
            stop = int(word_end[at[i]]) if split else int(at[i])
            t, h = self._enc(text[ws[i]: at[i]], W_TAIL), self._enc(text[at[i]: stop], W_HEAD) if split else []
            if t is None or h is None:
                continue
            pre_end[i], after[i] = a, np.searchsorted(tok_at, stop, "left")
            tail[i, : len(t)], head[i, : len(h)] = t, h
        return Cuts(base + s, base + end, np.full(len(s), f, np.int64), base + pre_end, base + after, tail, head)


@dataclass
class TokenBank:
    """Whole-file tokens and the cuts of lines and block bodies (token indices into `ids`)."""

    ids: np.ndarray  # int32 [tokens]: every file's tokens, one after another
    file_start: np.ndarray  # int64 [files + 1]: file f is ids[file_start[f]:file_start[f + 1]]
    file_weight: np.ndarray  # float32 [files]
    lines: Cuts  # every line from its code start to its newline, files and lines in order
    blocks: Cuts  # block bodies of compound statements
    held: list[Encoded] = field(default_factory=list)  # the held-out rows the trainer evaluates on

    @classmethod
    def build(cls, texts: list[str], weights: list[float], tok: Tokenizer) -> TokenBank:
        parser, seams = Parser(PY), _Seams(tok)
        encs = tok.encode_batch(texts)
        ids, starts, lines, blocks = [], [0], [], []
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
            s = np.maximum(np.searchsorted(tok_at, first, "right") - 1, 0)
            e = np.searchsorted(tok_at, line_stop, "left")  # the first token at or after the newline
            word_end = np.zeros(len(text) + 1, np.int64)
            for _piece, (p0, p1) in tok.pre_tokenizer.pre_tokenize_str(text):
                word_end[p0:p1] = p1
            lines.append(seams.cuts(text, chars, tok_at, word_end, first, np.where(first < line_stop, e, s), base, f))
            spans = block_spans(text, parser.parse(text.encode("utf-8")).root_node)
            if spans:
                be = np.searchsorted(tok_at, [b.end for b in spans], "left")
                blocks.append(seams.cuts(text, chars, tok_at, word_end, np.asarray([b.start for b in spans]), be, base, f))
        return cls(np.concatenate(ids), np.asarray(starts, np.int64), np.asarray(weights, np.float32),
                   Cuts.concat(lines), Cuts.concat(blocks))

    def save(self, path: Path) -> None:
        """An xz-compressed .npz, ids as uint16 and indices as int32 (the standard library's
        bank is ~5 MB: small enough to carry to a lent GPU)."""
        if len(self.ids) >= 2**31 or int(self.ids.max(initial=0)) >= 2**16:
            raise ValueError("token bank too large for its file format")
        arrays = {"ids": self.ids.astype(np.uint16), "file_start": self.file_start.astype(np.int32),
                  "file_weight": self.file_weight}
        for kind in ("line", "block"):
            cuts = getattr(self, f"{kind}s")
            arrays |= {f"{kind}_{k}": getattr(cuts, k).astype(np.int32) for k in CUT_FIELDS}
        raw = io.BytesIO()
        np.savez(raw, **arrays, **{f"held_{k}": v for k, v in _pack_rows(self.held).items()})
        path.write_bytes(lzma.compress(raw.getvalue(), preset=6))

    @classmethod
    def load(cls, path: Path) -> TokenBank:
        with np.load(io.BytesIO(lzma.decompress(path.read_bytes()))) as z:
            missing = [k for k in FIELDS if k not in z.files]
            if missing:
                raise ValueError(f"{path}: not a token bank of this version (no {', '.join(missing)})")
            cuts = {kind: Cuts(*(z[f"{kind}_{k}"].astype(np.int64) for k in CUT_FIELDS)) for kind in ("line", "block")}
            held = _unpack_rows({k[5:]: z[k] for k in z.files if k.startswith("held_")})
            return cls(z["ids"].astype(np.int64), z["file_start"].astype(np.int64),
                       z["file_weight"].astype(np.float32), cuts["line"], cuts["block"], held)

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


def main() -> None:
    """Build the bank of the training split (the trainer's files and weights), with the
    trainer's 32 held-out rows, into a file."""
    import argparse

    from engine.prompt.tokenizer import load_tokenizer
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
    seamed = int((bank.lines.after > bank.lines.start).sum())
    print(f"{bank.n_files} files, {len(bank.ids) / 1e6:.2f}M tokens, {len(bank.lines.start)} lines "
          f"({seamed} with a seam), {len(bank.blocks.start)} blocks, {len(bank.held)} held-out rows, {args.out.stat().st_size / 1e6:.1f} MB, "
          f"{time.perf_counter() - t0:.1f} s")


def held_rows(tok: Tokenizer, held_texts: list[str], block: int, n: int = 32) -> list[Encoded]:
    """The trainer's fixed held-out rows (engine.train.train: the same seed and count)."""
    from engine.prompt.tokenizer import special_tokens_of
    from engine.train.data import ExampleStream

    stream = ExampleStream(held_texts, [1.0] * len(held_texts), tok, special_tokens_of(tok), block, seed=1234)
    return [stream.next() for _ in range(n)]


if __name__ == "__main__":
    main()
