"""The token bank (engine/train/bank.py): cut points on real files, batches (engine/train/bank_sampler.py)
that match the layout of `data.make_batch`, and a file format that round-trips."""

from __future__ import annotations

import sysconfig
from pathlib import Path

import numpy as np
import pytest
import torch

from engine.model.checkpoint import EMBEDDED_DIR
from engine.model.native import NOISY
from engine.prompt.tokenizer import load_tokenizer, special_tokens_of
from engine.train.bank import CUT_FIELDS, TokenBank
from engine.train.bank_sampler import BankSampler
from engine.train.data import MAX_MIDDLE, Encoded, make_batch

STDLIB = Path(sysconfig.get_paths()["stdlib"])
FILES = ("textwrap.py", "bisect.py", "colorsys.py", "sched.py")  # ASCII source, blocks of every size
BLOCK = 16


@pytest.fixture(scope="module")
def tok():  # type: ignore[no-untyped-def]
    return load_tokenizer(EMBEDDED_DIR)


@pytest.fixture(scope="module")
def texts() -> list[str]:
    out = [(STDLIB / f).read_text() for f in FILES]
    assert all(t.isascii() for t in out)
    return out


@pytest.fixture(scope="module")
def bank(tok, texts: list[str]) -> TokenBank:  # type: ignore[no-untyped-def]
    return TokenBank.build(texts, [2.0, 1.0, 1.0, 1.0], tok)


def test_cut_points_are_whole_lines_and_block_bodies(tok, texts: list[str], bank: TokenBank) -> None:  # type: ignore[no-untyped-def]
    c = bank.lines
    for f, text in enumerate(texts):
        code_lines = [ln.lstrip(" \t") for ln in text.split("\n")]
        mine = np.flatnonzero(c.file == f)
        assert len(mine) == len(code_lines)  # one candidate per line, in order
        for i, want in zip(mine, code_lines, strict=True):
            middle = [*c.head[i][c.head[i] >= 0], *bank.ids[c.after[i]: c.end[i]]]
            assert tok.decode(middle) == want and (c.end[i] > c.start[i]) == bool(want)  # blank: no candidate
        blocks = np.flatnonzero(bank.blocks.file == f)
        assert len(blocks) > 0
        for i in blocks:
            b = bank.blocks
            body = tok.decode([*b.head[i][b.head[i] >= 0], *bank.ids[b.after[i]: b.end[i]]])
            assert body.strip() and body in text and body.split("\n")[0] in code_lines


def test_seams_match_the_engines_separate_tokenization(tok, texts: list[str], bank: TokenBank) -> None:  # type: ignore[no-untyped-def]
    """A prefix cut at a code start ends as the prefix tokenized alone ends (the indentation in
    one token), and the middle starts as the middle tokenized alone (the bare word)."""
    c, seamed = bank.lines, 0
    for f, text in enumerate(texts):
        starts = [0, *(i + 1 for i, ch in enumerate(text) if ch == "\n")]
        for i, ls in zip(np.flatnonzero(c.file == f), starts, strict=True):
            code = ls + len(text[ls:]) - len(text[ls:].lstrip(" \t"))
            stop = text.find("\n", ls)
            if code >= (stop if stop >= 0 else len(text)):
                continue  # a blank line
            tail, head = [int(x) for x in c.tail[i] if x >= 0], [int(x) for x in c.head[i] if x >= 0]
            middle = head + bank.ids[c.after[i]: c.end[i]].tolist()
            assert middle == tok.encode(text[code: stop if stop >= 0 else len(text)]).ids
            if i % 7 == 0:  # the prefix's end (every 7th line: encoding every prefix is quadratic)
                prefix = bank.ids[max(c.pre_end[i] - 3, bank.file_start[f]): c.pre_end[i]].tolist() + tail
                assert tok.encode(text[:code]).ids[-len(prefix):] == prefix
            seamed += bool(head)
    assert seamed > 500  # most lines are indented


def test_batch_rows_are_file_slices_in_the_engines_layout(tok, texts: list[str], bank: TokenBank) -> None:  # type: ignore[no-untyped-def]
    sp = special_tokens_of(tok)
    b = BankSampler(bank, sp, BLOCK, tok.get_vocab_size(), torch.device("cpu"), seed=3).batch(64, diffusion=True)
    T = b.n_clean
    no_suffix = kept = visible = 0
    for r in range(64):
        L = int((b.kind[r, :T] > 0).sum())
        ids = b.idx[r, :L].tolist()
        assert ids[0] == sp.fim_suffix and ids.count(sp.fim_prefix) == 1 and ids.count(sp.fim_middle) == 1
        i_pre, i_mid = ids.index(sp.fim_prefix), ids.index(sp.fim_middle)
        mid = ids[i_mid + 1:]
        real = mid[: mid.index(sp.end_of_middle)]
        assert len(mid) % BLOCK == 0 and set(mid[len(real):]) == {sp.end_of_middle}
        assert 1 <= len(real) <= MAX_MIDDLE - 1
        suffix, prefix = ids[1:i_pre], ids[i_pre + 1: i_mid]
        no_suffix += not suffix
        # prefix, middle and suffix are one contiguous stretch of one file's tokens
        whole = tok.decode(prefix + real + suffix)
        assert any(whole in t for t in texts)
        # the clean stream is what make_batch builds from the same row
        row = Encoded(ids, i_mid + 1, len(mid))
        ref = make_batch([row], sp, tok.get_vocab_size(), BLOCK, torch.Generator().manual_seed(0), True)
        n = ref.noisy_target.shape[1]
        for name in ("pos", "kind", "blk"):
            assert torch.equal(getattr(b, name)[r, :L], getattr(ref, name)[0, :L]), name
            assert torch.equal(getattr(b, name)[r, T: T + n], getattr(ref, name)[0, L: L + n]), name
        assert torch.equal(b.ar_target[r, :L], ref.ar_target[0])
        assert torch.equal(b.ar_weight[r, :L], ref.ar_weight[0])
        assert torch.equal(b.noisy_target[r, :n], ref.noisy_target[0])
        # the noise: a visible noisy token is the clean one or a replacement; masked ones weigh 1/t
        noisy, clean = b.idx[r, T: T + n], torch.tensor(mid)
        masked = noisy == sp.mask
        assert bool((b.kind[r, T: T + n] == NOISY).all()) and bool(masked.any())
        w = b.noisy_weight[r, : n - 1][masked[1:] & (b.noisy_target[r, : n - 1] != -100)]
        assert bool((w > 0).all())
        kept += int((noisy[~masked] == clean[~masked]).sum())
        visible += int((~masked).sum())
    assert no_suffix < 20  # ~10% of examples show no suffix
    assert 0.8 < kept / visible < 0.97  # 10% of visible tokens are replaced at random (T2T noise)


def test_sampler_is_seeded(tok, bank: TokenBank) -> None:  # type: ignore[no-untyped-def]
    sp = special_tokens_of(tok)
    a, b, c = (BankSampler(bank, sp, BLOCK, tok.get_vocab_size(), torch.device("cpu"), seed=s).batch(8, True)
               for s in (5, 5, 6))
    assert torch.equal(a.idx, b.idx) and torch.equal(a.noisy_weight, b.noisy_weight)
    assert not torch.equal(a.idx[:, : min(a.n_clean, c.n_clean)], c.idx[:, : min(a.n_clean, c.n_clean)])
    ar = BankSampler(bank, sp, BLOCK, tok.get_vocab_size(), torch.device("cpu"), seed=5).batch(8, False)
    assert ar.noisy_target.shape[1] == 0 and ar.idx.shape[1] == ar.n_clean


def test_file_round_trip(tmp_path: Path, bank: TokenBank) -> None:
    bank.held = [Encoded([1, 2, 3, 4], 2, 2), Encoded([5, 6], 1, 1)]
    bank.save(tmp_path / "bank.npz.xz")
    back = TokenBank.load(tmp_path / "bank.npz.xz")
    for name in ("ids", "file_start", "file_weight"):
        assert (getattr(back, name) == getattr(bank, name)).all(), name
    for kind in ("lines", "blocks"):
        for name in CUT_FIELDS:
            assert (getattr(getattr(back, kind), name) == getattr(getattr(bank, kind), name)).all(), (kind, name)
    assert back.held == bank.held
    np.savez(tmp_path / "old.npz", ids=bank.ids)
    (tmp_path / "old.xz").write_bytes(__import__("lzma").compress((tmp_path / "old.npz").read_bytes()))
    with pytest.raises(ValueError, match="not a token bank"):
        TokenBank.load(tmp_path / "old.xz")
