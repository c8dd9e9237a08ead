"""Real-family checkpoints through the text engine: prompt layout per family, events, cancel."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

from engine.api import CompletionRequest, Plan
from engine.service import TextEngine
from tests.engine.model.adapters.tiny_ckpts import (
    EOS,
    MASK,
    PAD,
    write_dream,
    write_llada,
    write_llada2,
)

CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 \n()[]{}:=+-*/.,_'\"#<>!"


def char_tokenizer(out: Path) -> None:
    """A character-level tokenizer that fits the tiny 96-token vocabulary (specials at 90..)."""
    vocab = {c: i for i, c in enumerate(CHARS)}
    vocab["<unk>"] = len(vocab)
    assert len(vocab) <= MASK
    vocab |= {"<|mask|>": MASK, "<|endoftext|>": EOS, "<|pad|>": PAD}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    tok.add_special_tokens(["<|mask|>", "<|endoftext|>", "<|pad|>"])
    tok.save(str(out / "tokenizer.json"))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "f32"])
@pytest.mark.parametrize("write, family", [(write_llada2, "llada2"), (write_llada, "llada"), (write_dream, "dream")])
def test_family_runs_through_the_text_engine(write: Callable[[Path], Path], family: str, tmp_path: Path,
                                             dtype: torch.dtype) -> None:
    path = write(tmp_path / family)
    char_tokenizer(path)
    eng = TextEngine(path, threads=1, max_len=256, max_prompt_tokens=64, dtype=dtype)
    assert eng.info()["family"] == family and eng.info()["dtype"] == str(dtype).removeprefix("torch.")
    ids, suffix, _, _ = eng.layout("def f(x):\n    return ", "\n\nprint(f(2))\n", heal=False)
    if family == "llada2":  # block-causal without FIM markers: the prompt is the prefix
        assert suffix == [] and ids == eng.tok.encode("def f(x):\n    return ").ids
    else:  # bidirectional: the suffix follows the masked middle
        assert suffix == eng.tok.encode("\n\nprint(f(2))\n").ids
    for preset in ("one_per_step", "threshold", "speedy", "quality", "low_confidence"):
        req = CompletionRequest("r", "d", "def f(x):\n    return ", "\n", Plan(max_tokens=8, preset=preset))
        evs = list(eng.complete(req))
        assert evs[-1].kind == "done" and evs[-1].stats is not None
        assert all(e.kind in ("draft", "edit") for e in evs[:-1])
    flag = threading.Event()
    flag.set()
    done = list(eng.complete(CompletionRequest("c", "d", "x = ", "", Plan(max_tokens=8)), flag))[-1]
    assert done.reason == "cancelled" and done.step == 0
