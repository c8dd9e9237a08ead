"""Prompt building without torch: one request's text (prefix, suffix, workspace context) becomes
a checkpoint's prompt ids, and a middle's tokens become the answer's text.

`TextEngine` builds its prompts here (with token healing plugged in as `heal`); so does the
SGLang backend of the language server (`llada_lsp.sglang_engine`), which tokenizes locally
and sends ids, so that both engines see the same prompt for the same request. Budgets:
`max_prompt_tokens` in all; the suffix takes at most `SUFFIX_SHARE` of it, the workspace
context at most `CONTEXT_SHARE` in whole chunks (most useful first), the prefix the rest. Each
cut moves in quanta (`engine.prompt.window`), so typing keeps the prompt's start.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

from engine.api import ContextChunk, Plan
from engine.decoding.stops import cut_text
from engine.model.special import SpecialTokens
from engine.prompt.prompt_format import (
    Parts,
    PromptFormat,
    clean_answer,
    language_of,
    render_context,
    split_tail,
)
from engine.prompt.tokenizer import load_prompt_format, load_tokenizer, special_tokens_of
from engine.prompt.window import char_window, token_window

FORMAT_SLACK = 16  # prompt tokens kept free for what the empty-format count misses (fence language)
SUFFIX_SHARE = 0.28
CONTEXT_SHARE = 0.4  # of the prompt budget, at most, for workspace context
CHARS_PER_TOKEN = 6  # a generous bound, to cut text before tokenizing it


def valid_text(s: str) -> str:
    """`s` with every lone surrogate replaced by '?' (same length); valid text as it is."""
    if s.isascii():
        return s
    try:
        s.encode("utf-8")
        return s
    except UnicodeEncodeError:
        return s.encode("utf-8", "replace").decode("utf-8")

# (ids backed off the prefix's end, their text, the first token's allowed set): token healing
Heal = Callable[[list[int]], tuple[int, str, Any]]


@dataclass(frozen=True)
class Layout:
    """A request's prompt: `ids`; `suffix` ids that follow the masked middle (bidirectional
    models); token healing's backed-off text and the first token's allowed set (or None)."""

    ids: list[int]
    suffix: list[int]
    partial: str = ""
    allowed: Any = None
    context_chunks: int = 0  # workspace chunks that fitted the budget


class PromptBuilder:
    """Prompts for one checkpoint: its tokenizer, named specials and prompt format."""

    def __init__(self, tok: Tokenizer, special: SpecialTokens, fmt: PromptFormat, max_prompt_tokens: int,
                 bidirectional: bool = False, heal: Heal | None = None) -> None:
        self.tok, self.sp, self.format = tok, special, fmt
        self.max_prompt_tokens = max_prompt_tokens
        self.bidirectional = bidirectional
        self.heal = heal
        ends = [i for t in fmt.end_texts if (i := tok.token_to_id(t)) is not None]
        # answers end at the format's end-of-turn token (a chat template's), else at end-of-middle
        self.turn_end = ends[0] if ends else None
        self.end_ids = {special.end_of_middle, *ends} | ({special.end_of_text} if ends else set())
        self.format_tokens = self._count_format_tokens()

    @classmethod
    def from_dir(cls, path: str | Path, max_prompt_tokens: int, template_file: str | Path | None = None
                 ) -> PromptBuilder:
        """The builder of the checkpoint whose tokenizer files are in `path`, without loading
        the model (no healing): FIM when its tokenizer has the markers, else its chat template."""
        tok = load_tokenizer(path)
        fim = all(tok.token_to_id(t) is not None for t in ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"))
        fmt = load_prompt_format(path, tok, fim, template_file)
        if fim:
            sp = special_tokens_of(tok)
        else:  # a chat checkpoint: only its end of text matters here (the server stops at it)
            eot = tok.token_to_id(fmt.special_texts.get("eos_token") or "<|endoftext|>")
            end = -1 if eot is None else eot
            sp = SpecialTokens(mask=-1, end_of_text=end, end_of_middle=end, pad=-1,
                               fim_prefix=-1, fim_suffix=-1, fim_middle=-1)
        return cls(tok, sp, fmt, max_prompt_tokens)

    @property
    def fim(self) -> bool:
        return min(self.sp.fim_prefix, self.sp.fim_suffix, self.sp.fim_middle) >= 0

    def _count_format_tokens(self) -> int:
        """Prompt tokens a rendered format spends with empty prefix and suffix."""
        if self.format.kind not in ("chat", "template"):
            return 3
        return len(self.encode(self.format.render(Parts("", "", ""))))

    def encode(self, text: str) -> list[int]:
        return self.tok.encode(valid_text(text), add_special_tokens=False).ids if text else []

    # -- context ---------------------------------------------------------------------------
    def context_text(self, chunks: Sequence[ContextChunk], language: str, budget: int) -> tuple[str, int]:
        """The rendered workspace context that fits `budget` tokens, in whole chunks taken in
        order (a chunk that does not fit ends the context): (text, chunks kept)."""
        if not chunks or budget <= 0:
            return "", 0
        kept: list[ContextChunk] = []
        used = 0
        for c in chunks:
            n = len(self.encode(render_context([c], language)))
            if used + n > budget:
                break
            kept.append(c)
            used += n
        return render_context(kept, language), len(kept)

    # -- layout ----------------------------------------------------------------------------
    def layout(self, prefix: str, suffix: str, heal: bool = True, doc_key: str = "",
               context: Sequence[ContextChunk] = ()) -> Layout:
        """The prompt of one request, trimmed to the budget. Text that is not valid Unicode (a
        lone surrogate: a file name that was not UTF-8, decoded with surrogateescape) has each
        bad code point replaced by '?' first: the tokenizer accepts valid text only."""
        prefix, suffix, doc_key = valid_text(prefix), valid_text(suffix), valid_text(doc_key)
        context = [ContextChunk(valid_text(c.path), valid_text(c.text)) for c in context]
        if self.format.kind in ("chat", "template"):
            return self._rendered(prefix, suffix, heal, doc_key, context)
        sp = self.sp
        budget = self.max_prompt_tokens - 3
        pre = self.encode(char_window(prefix, self.max_prompt_tokens * CHARS_PER_TOKEN))
        suf = self.encode(suffix[: self.max_prompt_tokens * CHARS_PER_TOKEN])
        suf = suf[: max(0, min(len(suf), int(budget * SUFFIX_SHARE)))]
        ctx_text, n_ctx = self.context_text(context, language_of(doc_key), int(budget * CONTEXT_SHARE))
        ctx = self.encode(ctx_text)
        pre = token_window(pre, budget - len(suf) - len(ctx))
        partial, allowed = "", None
        if heal and pre and self.heal is not None:
            k, partial, allowed = self.heal(pre)
            pre = pre[: len(pre) - k]
        pre = ctx + pre
        if self.bidirectional:
            return Layout(pre or [sp.end_of_text], suf, partial, allowed, n_ctx)
        if self.fim:
            return Layout([sp.fim_suffix, *suf, sp.fim_prefix, *pre, sp.fim_middle], [], partial, allowed, n_ctx)
        return Layout(pre or [sp.end_of_text], [], partial, allowed, n_ctx)

    def _rendered(self, prefix: str, suffix: str, heal: bool, doc_key: str,
                  context: Sequence[ContextChunk]) -> Layout:
        """A chat or template prompt: context in whole chunks, prefix and suffix trimmed in tokens
        (the prefix's start in quanta), the cursor's line healed, then rendered and tokenized."""
        budget = max(8, self.max_prompt_tokens - self.format_tokens - FORMAT_SLACK)
        language = language_of(doc_key)
        suf = self.tok.encode(suffix[: budget * CHARS_PER_TOKEN], add_special_tokens=False) if suffix else None
        n_suf = min(len(suf.ids), int(budget * SUFFIX_SHARE)) if suf else 0
        suffix_text = suffix[: suf.offsets[n_suf - 1][1]] if suf and n_suf else ""
        ctx_text, n_ctx = self.context_text(context, language, int(budget * CONTEXT_SHARE))
        n_ctx_tokens = len(self.encode(ctx_text))
        pre_text = char_window(prefix, budget * CHARS_PER_TOKEN)
        pre = self.tok.encode(pre_text, add_special_tokens=False) if pre_text else None
        if pre is not None:
            kept = token_window(pre.ids, budget - n_suf - n_ctx_tokens)
            pre_text = pre_text[pre.offsets[len(pre.ids) - len(kept)][0]:] if kept else ""
        head, tail = split_tail(pre_text)
        partial, allowed = "", None
        if heal and tail and self.heal is not None:
            _k, partial, allowed = self.heal(self.encode(tail))
            if not tail.endswith(partial):
                partial, allowed = "", None
            tail = tail[: len(tail) - len(partial)]
        text = self.format.render(Parts(head, tail, suffix_text, language, ctx_text))
        return Layout(self.encode(text), [], partial, allowed, n_ctx)

    # -- answers ---------------------------------------------------------------------------
    def answer(self, toks: list[int], plan: Plan, partial: str, tail: str) -> str:
        """The middle's text: up to the format's end token, without the format's artefacts (a
        chat answer's fences and echo of `tail`, the cursor's line) and the healed partial
        token, cut at the stop rule."""
        if self.end_ids != {self.sp.end_of_middle}:
            toks = toks[: next((i for i, t in enumerate(toks) if t in self.end_ids), len(toks))]
        text = self.tok.decode([t for t in toks if t != self.sp.end_of_middle])
        if self.format.wraps_answer:
            text = clean_answer(text, tail)
        text = text[len(partial):] if text.startswith(partial) else text
        return cut_text(text, plan)[0]

    def tail_of(self, prompt: list[int], partial: str) -> str:
        """The cursor's line as a prompt ends it (the text a chat answer may echo)."""
        return split_tail(self.tok.decode(prompt[-64:]))[1] + partial
