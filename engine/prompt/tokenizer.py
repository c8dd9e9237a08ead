"""Tokenizer loading, the embedded model's special tokens (named, never literal ids), the set of
special ids of any vocabulary, and the prompt format a checkpoint's tokenizer files imply."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

from engine.model.special import SpecialTokens
from engine.prompt.prompt_format import PromptFormat, read_template_file, turn_end

PROMPT_FORMATS = ("auto", "chat", "plain")  # the override of the checkpoint's own choice
TEMPLATE_TOKENS = ("bos_token", "eos_token", "pad_token", "unk_token", "mask_token")

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
    """The tokenizer of a checkpoint directory (its tokenizer.json) or of a tokenizer.json file;
    ValueError (one line) when the file is not a tokenizer the `tokenizers` library reads."""
    p = Path(path)
    f = p / "tokenizer.json" if p.is_dir() else p
    if not f.exists():
        raise FileNotFoundError(f"{f}: no tokenizer.json (only fast tokenizers are loaded)")
    try:
        return Tokenizer.from_file(str(f))
    except Exception as e:  # noqa: BLE001 - the Rust library raises a bare Exception; re-raised as ValueError
        raise ValueError(f"{f}: not a tokenizer this engine reads: {e}") from None


def special_tokens_of(tok: Tokenizer) -> SpecialTokens:
    ids: dict[str, int] = {}
    for field, text in SPECIAL_TOKEN_NAMES.items():
        tid = tok.token_to_id(text)
        if tid is None:
            raise ValueError(f"tokenizer lacks the special token {text!r} ({field})")
        ids[field] = tid
    return SpecialTokens(**ids)


def special_id_set(tok: Tokenizer, special: SpecialTokens) -> set[int]:
    """Every added or special token of `tok` plus the model's named specials: the ids token
    healing never offers, wherever they sit in the vocabulary."""
    ids = set(tok.get_added_tokens_decoder())
    ids |= {v for v in dataclasses.asdict(special).values() if v >= 0}
    return ids


def _config(path: Path) -> dict[str, Any]:
    f = path / "tokenizer_config.json"
    return json.loads(f.read_text(encoding="utf-8")) if f.exists() else {}


def _text(v: Any) -> str | None:
    return v.get("content") if isinstance(v, dict) else v if isinstance(v, str) else None


def chat_template_of(path: Path, cfg: dict[str, Any]) -> str:
    """The checkpoint's default chat template: tokenizer_config.json's `chat_template` (a string
    or a list of named templates) or a chat_template.jinja file; "" when it has none."""
    tmpl = cfg.get("chat_template")
    if isinstance(tmpl, list):
        tmpl = next((t.get("template") for t in tmpl if t.get("name") == "default"), None)
    if not tmpl and (path / "chat_template.jinja").exists():
        tmpl = (path / "chat_template.jinja").read_text(encoding="utf-8")
    return tmpl or ""


# Qwen2.5's FIM tokens at their ids: Qwen2.5's tokenizer adds them (with <|fim_pad|>, <|repo_name|>
# and <|file_sep|>, 151662-151664) for every Qwen2.5 model, so every derivative carries them, FIM
# trained (Qwen2.5-Coder) or not (Dream, Dream-Coder, DiffuCoder: diffusion models adapted from
# Qwen2.5 or Qwen2.5-Coder and trained without them)
QWEN25_FIM_IDS = {"<|fim_prefix|>": 151659, "<|fim_middle|>": 151660, "<|fim_suffix|>": 151661}
MODEL_CARD = "README.md"


def fim_trained(path: Path, tok: Tokenizer) -> tuple[bool, str]:
    """Whether the checkpoint in `path` was trained with the FIM tokens its tokenizer has, and
    why, from its files: tokens of its own are evidence (the embedded models); Qwen2.5's
    inherited ones are not, unless its model card (README.md) shows a prompt with all three."""
    ids = {t: tok.token_to_id(t) for t in QWEN25_FIM_IDS}
    if ids != QWEN25_FIM_IDS:
        return True, "its tokenizer has FIM tokens of its own (not Qwen2.5's inherited ones)"
    card = path / MODEL_CARD
    text = card.read_text(encoding="utf-8", errors="replace") if card.is_file() else ""
    if all(t in text for t in QWEN25_FIM_IDS):
        return True, f"its model card ({MODEL_CARD}) shows a prompt with the FIM tokens"
    return False, ("its FIM tokens are Qwen2.5's (ids 151659-151661, in every Qwen2.5 derivative) and no file "
                   f"says it was trained with them (no FIM prompt in {MODEL_CARD})")


def load_prompt_format(path: str | Path, tok: Tokenizer, fim: bool,
                       template_file: str | Path | None = None, override: str = "auto") -> PromptFormat:
    """The prompt format of the checkpoint whose tokenizer files are in `path`: a user's
    template file when given; FIM when the model has the markers (`fim`) and was trained with them
    (`fim_trained`); the chat template when the
    checkpoint ships one (an instruct checkpoint: tokenizer_config.json's `chat_template` or
    chat_template.jinja; base checkpoints ship none); else plain (engine.prompt.prompt_format).
    Its files decide, never its path. `override`: "chat" or "plain" forces that choice (a base
    checkpoint that ships a template; "chat" without a template is an error)."""
    if override not in PROMPT_FORMATS:
        raise ValueError(f"prompt format {override!r}: expected one of {', '.join(PROMPT_FORMATS)}")
    p = Path(path)
    cfg = _config(p) if p.is_dir() else {}
    texts = {k: t for k in TEMPLATE_TOKENS if (t := _text(cfg.get(k)))}
    chat = chat_template_of(p, cfg) if p.is_dir() else ""

    def ends() -> tuple[str, ...]:
        added = [t.content for t in tok.get_added_tokens_decoder().values()]
        end = turn_end(chat, texts, added) if chat else None
        return (end,) if end else ()

    if template_file:
        return PromptFormat("template", read_template_file(template_file), str(template_file), ends(), texts,
                            reason="a prompt template file was given")
    if override == "chat" and not chat:
        raise ValueError(f"{p}: prompt format 'chat' asked for, but the checkpoint has no chat template "
                         "(tokenizer_config.json chat_template or chat_template.jinja)")
    trained, why = fim_trained(p if p.is_dir() else p.parent, tok) if fim else (False, "")
    if trained and override == "auto":
        return PromptFormat("fim", reason=why)
    unused = f"; no FIM: {why}" if fim else ""
    if override != "auto":
        unused = f"; --prompt-format {override} asked for" + unused
    if chat and override != "plain":
        return PromptFormat("chat", chat, str(p / "tokenizer_config.json"), ends(), texts,
                            reason="the checkpoint ships a chat template" + unused)
    return PromptFormat("plain", reason="no chat template" + unused)
