"""Prompt building without torch: one request's text (prefix, suffix, workspace context) becomes
a checkpoint's prompt ids, and a middle's tokens become the answer's text.

`TextEngine` builds its prompts here (handing down its token healing, a `Healer`); so does the
SGLang backend of the language server (`llada_lsp.engines.sglang_engine`), which tokenizes locally
and sends ids, so that both engines see the same prompt for the same request. Budgets:
`max_prompt_tokens` in all; the suffix takes at most `SUFFIX_SHARE` of it, the workspace
context at most `CONTEXT_SHARE` (`max_context_tokens`, which the engine reports to the
language server), the prefix the rest. Each cut moves in quanta (`engine.prompt.window`), so
typing keeps the prompt's start.

Workspace context is budgeted here alone, in tokens: the language server gathers and ranks
chunks (most useful first) and the builder places them once, in that order: a chunk whole when
it fits what is left, else its longest head (at least `MIN_HEAD_LINES` leading lines: a
definition's signature and first lines) that fits, else none of it; a later, smaller chunk
still gets the room a big one left.
"""

from __future__ import annotations

import bisect
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

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
CONTEXT_SHARE = 0.4  # of the prompt budget, at most, for workspace context (the one place it is set)
MIN_HEAD_LINES = 2  # a context chunk cut to the budget keeps at least this many leading lines
PLACED_ENTRIES = 16  # context placements remembered (a document's chunks stay put while typing)
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

class Healer(Protocol):
    """Token healing as the builder uses it (`engine.prompt.healing.Healing`, which needs torch:
    the engine hands one down; the SGLang backend builds without)."""

    def back_off(self, ids: list[int]) -> tuple[int, str, Any]:
        """(ids backed off the prompt's end, their text, the first token's allowed set)."""
        ...


@dataclass(frozen=True)
class Layout:
    """A request's prompt: `ids`; `suffix` ids that follow the masked middle (bidirectional
    models); token healing's backed-off text and the first token's allowed set (or None)."""

    ids: list[int]
    suffix: list[int]
    partial: str = ""
    allowed: Any = None
    context: tuple[ContextChunk, ...] = ()  # the workspace chunks placed (a cut one as its head)

    @property
    def context_chunks(self) -> int:
        """How many workspace chunks the prompt holds."""
        return len(self.context)


class PromptBuilder:
    """Prompts for one checkpoint: its tokenizer, named specials and prompt format."""

    def __init__(self, tok: Tokenizer, special: SpecialTokens, fmt: PromptFormat, max_prompt_tokens: int,
                 bidirectional: bool = False, heal: Healer | None = None) -> None:
        self.tok, self.sp, self.format = tok, special, fmt
        self.max_prompt_tokens = max_prompt_tokens
        self.bidirectional = bidirectional
        self.heal = heal
        ends = [i for t in fmt.end_texts if (i := tok.token_to_id(t)) is not None]
        # answers end at the format's end-of-turn token (a chat template's), else at end-of-middle
        self.turn_end = ends[0] if ends else None
        self.end_ids = {special.end_of_middle, *ends} | ({special.end_of_text} if ends else set())
        self.format_tokens = self._count_format_tokens()
        # (chunks, language) -> (rendered context, the chunks placed, its ids): see `_context`
        self._placed: OrderedDict[tuple[tuple[ContextChunk, ...], str], tuple[str, tuple[ContextChunk, ...], list[int]]] \
            = OrderedDict()
        self._placed_lock = threading.Lock()

    @classmethod
    def from_dir(cls, path: str | Path, max_prompt_tokens: int, template_file: str | Path | None = None
                 ) -> PromptBuilder:
        """The builder of the checkpoint whose tokenizer files are in `path`, without loading
        the model (no healing): FIM when its tokenizer has the markers, else its chat template."""
        tok = load_tokenizer(path)
        fim = all(tok.token_to_id(t) is not None for t in ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"))
        fmt = load_prompt_format(path, tok, fim, template_file)
        if fmt.kind == "fim":
            sp = special_tokens_of(tok)
        else:  # a chat checkpoint: only its end of text matters here (the server stops at it)
            eot = tok.token_to_id(fmt.special_texts.get("eos_token") or "<|endoftext|>")
            end = -1 if eot is None else eot
            sp = SpecialTokens(mask=-1, end_of_text=end, end_of_middle=end, pad=-1,
                               fim_prefix=-1, fim_suffix=-1, fim_middle=-1)
        return cls(tok, sp, fmt, max_prompt_tokens)

    @property
    def fim(self) -> bool:
        """Whether prompts are FIM: the format chose it (the model was trained with its markers)."""
        return self.format.kind == "fim" and min(self.sp.fim_prefix, self.sp.fim_suffix, self.sp.fim_middle) >= 0

    def _count_format_tokens(self) -> int:
        """Prompt tokens a rendered format spends with empty prefix and suffix."""
        if self.format.kind not in ("chat", "template"):
            return 3
        return len(self.encode(self.format.render(Parts("", "", ""))))

    def encode(self, text: str) -> list[int]:
        return self.tok.encode(valid_text(text), add_special_tokens=False).ids if text else []

    @property
    def prompt_budget(self) -> int:
        """Prompt tokens for the request's text (prefix, suffix, context): the budget less what
        the format itself spends."""
        if self.format.kind in ("chat", "template"):
            return max(8, self.max_prompt_tokens - self.format_tokens - FORMAT_SLACK)
        return self.max_prompt_tokens - 3

    @property
    def max_context_tokens(self) -> int:
        """The workspace context's share of the prompt, in tokens (reported to the server)."""
        return int(self.prompt_budget * CONTEXT_SHARE)

    # -- context ---------------------------------------------------------------------------
    def place_context(self, chunks: Sequence[ContextChunk], language: str, budget: int
                      ) -> tuple[str, tuple[ContextChunk, ...]]:
        """The rendered workspace context within `budget` tokens and the chunks it holds: in
        the given (ranked) order, each whole when it fits what is left, else its longest head
        that fits (`MIN_HEAD_LINES` lines at least), else left out. Each chunk is counted alone,
        with a token kept free per seam between chunks; the whole is counted once at the end
        (and loses its last chunks in the rare case the seams took more)."""
        kept: list[ContextChunk] = []
        used = 0
        for c in chunks if budget > 0 else ():
            placed = self._fitting(c, language, budget - used - len(kept))
            if placed is not None:
                kept.append(placed[0])
                used += placed[1]
        text = render_context(kept, language)
        while kept and len(self.encode(text)) > budget:
            kept.pop()
            text = render_context(kept, language)
        return text, tuple(kept)

    def _context(self, chunks: Sequence[ContextChunk], language: str) -> tuple[str, tuple[ContextChunk, ...], list[int]]:
        """`place_context` within the context's share, with the rendered text's ids; remembered,
        since the server hands a document the same chunks while the user types."""
        key = (tuple(chunks), language)
        with self._placed_lock:
            got = self._placed.get(key)
            if got is not None:
                self._placed.move_to_end(key)
                return got
        text, placed = self.place_context(chunks, language, self.max_context_tokens)
        got = (text, placed, self.encode(text))
        with self._placed_lock:
            self._placed[key] = got
            while len(self._placed) > PLACED_ENTRIES:
                self._placed.popitem(last=False)
        return got

    def _fitting(self, chunk: ContextChunk, language: str, room: int) -> tuple[ContextChunk, int] | None:
        """`chunk`, or its longest head, within `room` tokens, with its count; None if neither.
        The head's length is read off the whole chunk's token offsets, then counted exactly."""
        if room <= 0:
            return None
        rendered = render_context([chunk], language)
        enc = self.tok.encode(rendered, add_special_tokens=False)
        if len(enc.ids) <= room:
            return chunk, len(enc.ids)
        body = chunk.text.rstrip()
        start = rendered.find(body) if body else -1
        if start < 0:
            return None
        ends = [e for _, e in enc.offsets]
        lines, end, fit = body.split("\n"), start, 0
        for m, line in enumerate(lines[:-1], 1):  # tokens of m lines, plus one for the blank line after
            end += len(line) + (m > 1)
            if bisect.bisect_right(ends, end) + 1 > room:
                break
            fit = m
        for m in range(fit, MIN_HEAD_LINES - 1, -1):  # exactly, one line less while it is over
            head = ContextChunk(chunk.path, "\n".join(lines[:m]).rstrip())
            n = len(self.encode(render_context([head], language)))
            if n <= room:
                return head, n
        return None

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
        budget = self.prompt_budget
        pre = self.encode(char_window(prefix, self.max_prompt_tokens * CHARS_PER_TOKEN))
        suf = self.encode(suffix[: self.max_prompt_tokens * CHARS_PER_TOKEN])
        suf = suf[: max(0, min(len(suf), int(budget * SUFFIX_SHARE)))]
        _ctx_text, placed, ctx = self._context(context, language_of(doc_key))
        pre = token_window(pre, budget - len(suf) - len(ctx))
        partial, allowed = "", None
        if heal and pre and self.heal is not None:
            k, partial, allowed = self.heal.back_off(pre)
            pre = pre[: len(pre) - k]
        pre = ctx + pre
        if self.bidirectional:
            return Layout(pre or [sp.end_of_text], suf, partial, allowed, placed)
        if self.fim:
            return Layout([sp.fim_suffix, *suf, sp.fim_prefix, *pre, sp.fim_middle], [], partial, allowed, placed)
        return Layout(pre or [sp.end_of_text], [], partial, allowed, placed)

    def _rendered(self, prefix: str, suffix: str, heal: bool, doc_key: str,
                  context: Sequence[ContextChunk]) -> Layout:
        """A chat or template prompt: context placed in its share, prefix and suffix trimmed in tokens
        (the prefix's start in quanta), the cursor's line healed, then rendered and tokenized."""
        budget = self.prompt_budget
        language = language_of(doc_key)
        suf = self.tok.encode(suffix[: budget * CHARS_PER_TOKEN], add_special_tokens=False) if suffix else None
        n_suf = min(len(suf.ids), int(budget * SUFFIX_SHARE)) if suf else 0
        suffix_text = suffix[: suf.offsets[n_suf - 1][1]] if suf and n_suf else ""
        ctx_text, placed, ctx_ids = self._context(context, language)
        n_ctx_tokens = len(ctx_ids)
        pre_text = char_window(prefix, budget * CHARS_PER_TOKEN)
        pre = self.tok.encode(pre_text, add_special_tokens=False) if pre_text else None
        if pre is not None:
            kept = token_window(pre.ids, budget - n_suf - n_ctx_tokens)
            pre_text = pre_text[pre.offsets[len(pre.ids) - len(kept)][0]:] if kept else ""
        head, tail = split_tail(pre_text)
        partial, allowed = "", None
        if heal and tail and self.heal is not None:
            _k, partial, allowed = self.heal.back_off(self.encode(tail))
            if not tail.endswith(partial):
                partial, allowed = "", None
            tail = tail[: len(tail) - len(partial)]
        text = self.format.render(Parts(head, tail, suffix_text, language, ctx_text))
        return Layout(self.encode(text), [], partial, allowed, placed)

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
