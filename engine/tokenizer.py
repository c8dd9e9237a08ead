"""Tokenizer loading and the embedded model's special tokens (named, never literal ids)."""

from __future__ import annotations

from pathlib import Path

from tokenizers import Tokenizer

from engine.model import SpecialTokens

# Order fixes the ids of the embedded tokenizer: the BPE trainer adds them first.
SPECIAL_TOKEN_NAMES: dict[str, str] = {
    "pad": "<|pad|>",
    "end_of_text": "<|endoftext|>",
    "end_of_middle": "<|eom|>",
    "fim_middle": "<|fim_middle|>",
    "mask": "<|mask|>",
    "fim_prefix": "<|fim_prefix|>",
    "fim_suffix": "<|fim_suffix|>",
}


def load_tokenizer(path: str | Path) -> Tokenizer:
    p = Path(path)
    return Tokenizer.from_file(str(p / "tokenizer.json" if p.is_dir() else p))


def special_tokens_of(tok: Tokenizer) -> SpecialTokens:
    ids: dict[str, int] = {}
    for field, text in SPECIAL_TOKEN_NAMES.items():
        tid = tok.token_to_id(text)
        if tid is None:
            raise ValueError(f"tokenizer lacks the special token {text!r} ({field})")
        ids[field] = tid
    return SpecialTokens(**ids)
