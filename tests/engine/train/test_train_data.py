"""The example pipeline's fast paths: workers that build whole batches, the mask built where
the step runs, cached line starts and block bodies, and a carried copy of the corpus."""

from __future__ import annotations

import random
import sysconfig
import tarfile
from pathlib import Path

import pytest
import torch
from tree_sitter import Node, Parser

from engine.model.checkpoint import EMBEDDED_DIR
from engine.prompt.tokenizer import load_tokenizer, special_tokens_of
from engine.train import corpus
from engine.train.data import (
    BLOCK_PARENTS,
    PY,
    Batch,
    Encoded,
    ExampleStream,
    _collect_blocks,
    _line_starts,
    attach_mask,
    block_spans,
    cut_example,
    make_batch,
)
from engine.train.parallel import BuildSpec, ParallelStream

ROOT = Path(__file__).resolve().parents[3]
TEXTS = [(ROOT / "engine" / name).read_text() for name in ("decoding/decode.py", "decoding/scheduler.py", "service.py")]
STDLIB = Path(sysconfig.get_paths()["stdlib"])


def _walk(root: Node) -> list[tuple[int, int]]:
    """The reference: every node visited from Python, depth first, last child first."""
    out, stack = [], [root]
    while stack:
        n = stack.pop()
        if n.type == "block" and n.parent is not None and n.parent.type in BLOCK_PARENTS:
            out.append((n.start_byte, n.end_byte))
        stack.extend(n.children)
    return out


@pytest.mark.parametrize("name", ["argparse.py", "json/decoder.py", "asyncio/base_events.py"])
def test_block_query_finds_the_walks_blocks_in_its_order(name: str) -> None:
    text = (STDLIB / name).read_text()
    root = Parser(PY).parse(text.encode()).root_node
    found: list[Node] = []
    _collect_blocks(root, found)
    assert [(n.start_byte, n.end_byte) for n in found] == _walk(root) and found


def test_line_starts_and_cached_cuts_match_the_plain_cut() -> None:
    text = "a = 1\n\nif a:\n    b = 2\n    c = 3\nx = 'é'\n"
    assert _line_starts(text) == [0, 6, 7, 13, 23, 33, 41]
    root = Parser(PY).parse(text.encode()).root_node
    for kind in ("line", "multi_line", "block", "span"):
        for seed in range(5):
            plain = cut_example(text, kind, random.Random(seed), root)
            cached = cut_example(text, kind, random.Random(seed), None, lines=_line_starts(text),
                                 spans=block_spans(text, root) if kind == "block" else None)
            assert plain == cached


def _rows(n: int) -> list[Encoded]:
    tok = load_tokenizer(EMBEDDED_DIR)
    s = ExampleStream(TEXTS, [1.0] * len(TEXTS), tok, special_tokens_of(tok), 16, seed=3)
    return [s.next() for _ in range(n)]


def test_mask_built_later_is_the_mask_built_at_once() -> None:
    tok = load_tokenizer(EMBEDDED_DIR)
    sp = special_tokens_of(tok)
    rows = _rows(5)
    now = make_batch(rows, sp, 4096, 16, torch.Generator().manual_seed(7), True)
    later = make_batch(rows, sp, 4096, 16, torch.Generator().manual_seed(7), True, with_mask=False)
    assert later.mask is None and now.mask is not None
    built = attach_mask(later).mask
    assert built is not None and torch.equal(built, now.mask) and torch.equal(later.idx, now.idx)


def _built(seed: int, n: int) -> list[Batch]:
    tok = load_tokenizer(EMBEDDED_DIR)
    ps = ParallelStream(TEXTS, [1.0] * len(TEXTS), tok, special_tokens_of(tok), 16, seed=seed, batch=3,
                        workers=2, build=BuildSpec(vocab=4096, ar_steps=2))
    try:
        got = [ps.next_batch() for _ in range(n)]
    finally:
        ps.close()
    assert all(isinstance(b, Batch) for b in got)
    return got  # type: ignore[return-value]


def test_workers_build_deterministic_batches_that_follow_the_warm_up() -> None:
    a, b = _built(4, 4), _built(4, 4)
    for x, y in zip(a, b, strict=True):
        assert torch.equal(x.idx, y.idx) and torch.equal(x.noisy_weight, y.noisy_weight)
    # global steps 0 and 1 are the autoregressive warm-up (no noisy copy), 2 and 3 diffuse
    assert [x.noisy_target.shape[1] for x in a[:2]] == [0, 0]
    assert all(x.noisy_target.shape[1] > 0 and x.mask is None for x in a[2:])


def test_a_carried_standard_library_gives_the_same_keys_and_split(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    here = corpus.all_files()
    dest = tmp_path / "corpus.tar.gz"
    n = corpus.pack(dest, stdlib_only=True)
    assert n == sum(f.key.startswith("stdlib/") for f in here)
    with tarfile.open(dest) as tar:
        tar.extractall(tmp_path / "c", filter="data")
    monkeypatch.setenv(corpus.CORPUS_ENV, str(tmp_path / "c"))
    there = corpus.all_files()
    assert [f.key for f in there] == [f.key for f in here]  # packages from this Python's site
    assert all(f.path.is_relative_to(tmp_path / "c") for f in there if f.key.startswith("stdlib/"))
    assert [f.key for f in corpus.split()[1]] == [f.key for f in here if corpus.is_heldout(f.key)]
    monkeypatch.setenv(corpus.CORPUS_ENV, str(tmp_path / "nothing"))
    with pytest.raises(FileNotFoundError, match="no stdlib"):
        corpus.all_files()


def test_batches_cross_the_queue_as_plain_arrays_and_come_back_equal() -> None:
    from engine.train.parallel import from_wire, pick_transport, to_wire

    tok = load_tokenizer(EMBEDDED_DIR)
    b = make_batch(_rows(4), special_tokens_of(tok), 4096, 16, torch.Generator().manual_seed(2), True,
                   with_mask=False)
    wire = to_wire(b)
    assert not any(isinstance(v, torch.Tensor) for v in wire.values())  # nothing shared by descriptor
    back = from_wire(wire)
    for name, v in b.__dict__.items():
        got = getattr(back, name)
        assert torch.equal(got, v) if isinstance(v, torch.Tensor) else got == v, name
    wire_first, ms = pick_transport(b)
    assert set(ms) == {"tensors", "arrays"} and all(v > 0 for v in ms.values())
    assert wire_first == (ms["arrays"] < ms["tensors"])
    assert back.idx.dtype == torch.long
