"""Train the embedded byte-level BPE tokenizer on the training split only."""

from __future__ import annotations

import argparse
import random
from collections.abc import Iterator
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from engine.prompt.tokenizer import SPECIAL_TOKEN_NAMES
from engine.train.corpus import read_text, split, write_heldout_list


def _texts(max_bytes: int, seed: int) -> Iterator[str]:
    train, held = split()
    write_heldout_list(held)
    files = list(train)
    random.Random(seed).shuffle(files)
    total = 0
    for f in files:
        text = read_text(f)
        if text is None:
            continue
        total += len(text)
        yield text
        if total >= max_bytes:
            break


def train_tokenizer(out: Path, vocab_size: int = 4096, max_bytes: int = 30_000_000, seed: int = 0) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKEN_NAMES.values()),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=True,
    )
    tok.train_from_iterator(_texts(max_bytes, seed), trainer=trainer)
    out.mkdir(parents=True, exist_ok=True)
    tok.save(str(out / "tokenizer.json"))
    return tok


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--vocab-size", type=int, default=4096)
    args = ap.parse_args()
    tok = train_tokenizer(args.out, args.vocab_size)
    print("vocab", tok.get_vocab_size())


if __name__ == "__main__":
    main()
