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


def load_prompt_format(path: str | Path, tok: Tokenizer, fim: bool,
                       template_file: str | Path | None = None, override: str = "auto") -> PromptFormat:
    """The prompt format of the checkpoint whose tokenizer files are in `path`: a user's
    template file when given; FIM when the model has the markers; the chat template when the
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
        return PromptFormat("template", read_template_file(template_file), str(template_file), ends(), texts)
    if override == "chat" and not chat:
        raise ValueError(f"{p}: prompt format 'chat' asked for, but the checkpoint has no chat template "
                         "(tokenizer_config.json chat_template or chat_template.jinja)")
    if fim and override == "auto":
        return PromptFormat("fim")
    if chat and override != "plain":
        return PromptFormat("chat", chat, str(p / "tokenizer_config.json"), ends(), texts)
    return PromptFormat("plain")
