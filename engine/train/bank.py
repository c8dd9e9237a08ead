"""A token bank: fill-in-the-middle batches cut on the training device itself.

On a lent GPU the host's cores, not the GPU, set the pace of `data.ExampleStream` (BENCHMARKS.md,
"A lent GPU": 74% of a run waited for examples). The bank moves the cutting to the device: every
training file is tokenized once, whole, and its cut points are found once (each line's code
start and end, each block body of the syntax tree, as token indices). A batch is then a handful
of tensor operations on the device (`engine.train.bank_sampler.BankSampler`): pick a file by
weight, a kind, a candidate span of that kind in the file, and gather suffix / prefix / middle
tokens into the suffix-first layout of `data.encode_example`; `echo.renoise` draws the
diffusion noise there too.

Seams. The engine tokenizes the prefix on its own, so a prefix that ends in indentation ends
in one whitespace token ("\n" and all the spaces), and the middle starts with the bare word.
Cut from the whole file's tokens, the same place falls inside a token: byte-level BPE puts the
last indentation space in front of the word (" def"), and splits a run of blank lines before
unindented code differently (two newline tokens against one). Session 18 trained on such cuts and the
model got worse at exactly those prompts (BENCHMARKS.md), so every cut at a code start carries
its seam: the whitespace before it tokenized alone (the prefix's last tokens) and the rest of
the word it splits tokenized alone (the middle's first tokens; BPE merges within a word, so
" expand" and "expand" can split differently), found once when the bank is built. A cut elsewhere inside a line falls on a token boundary of the whole text, as the
engine's token healing presents a word fragment at the cursor.
"""

from __future__ import annotations

import io
import lzma
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer
from tree_sitter import Parser

from engine.train.data import PY, Encoded, block_spans

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
        arrays: dict[str, np.ndarray] = {"ids": self.ids.astype(np.uint16),
                                         "file_start": self.file_start.astype(np.int32),
                                         "file_weight": self.file_weight}
        for kind in ("line", "block"):
            cuts = getattr(self, f"{kind}s")
            arrays |= {f"{kind}_{k}": getattr(cuts, k).astype(np.int32) for k in CUT_FIELDS}
        arrays |= {f"held_{k}": v for k, v in _pack_rows(self.held).items()}
        raw = io.BytesIO()
        # mypy checks an unpacked **dict against every keyword parameter, here recent numpy's
        # `allow_pickle: bool`; passing allow_pickle would store it as an array under numpy 1.26
        np.savez(raw, **arrays)  # type: ignore[arg-type]
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
