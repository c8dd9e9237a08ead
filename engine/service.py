"""The text-level engine: loads a model, tokenizes requests into decoding sequences, and turns
their middles into text.

Decoding is the step loop's (`engine.decoding.scheduler.Scheduler`): the daemon runs one over many
connections, and `TextEngine.loop()` is this engine's own, for a caller in one thread (the
language server's in-process engine, benches, the CLI). `TextEngine.complete` and `remask` are
that loop with one request (`engine.decoding.local`). Text never crosses the stop rule: the tokens after
it are not reported.

The preset is called `preset` throughout the engine; `mode` survives only as the name users
see (the LSP's `mode` option, the CLI's `--mode`, `info()["mode"]` on the wire).
"""

from __future__ import annotations

import json
import math
import os
import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import torch

import kernels
from engine.api import CompletionRequest, ContextChunk, EngineEvent, Plan
from engine.decoding import local
from engine.decoding.alternatives import only
from engine.decoding.constraint import NameConstraint
from engine.decoding.decode import Sequence
from engine.decoding.decode_bidir import make_sequence
from engine.decoding.indel import policy_for
from engine.decoding.policies import Policy
from engine.decoding.scheduler import Scheduler
from engine.decoding.stops import stop_index
from engine.model.checkpoint import EMBEDDED_DIR
from engine.model.loader import end_id_sources, load_model
from engine.model.native import Transformer
from engine.model.threads import ThreadGovernor
from engine.presets import DEFAULT_PRESET
from engine.prompt.builder import PromptBuilder
from engine.prompt.healing import Healing
from engine.prompt.name_trie import NamePaths
from engine.prompt.prompt_cache import PromptCache
from engine.prompt.tokenizer import load_prompt_format, load_tokenizer, special_id_set

EMBEDDED_MAX_PROMPT = 448  # the embedded model trained on <= 128 suffix + 320 prefix tokens
REAL_MAX_PROMPT = 4096  # real checkpoints' default prompt budget (capped by context and max_len)
EMBEDDED_MAX_LEN = 2048
REAL_MAX_LEN = REAL_MAX_PROMPT + 512  # a 4k prompt and a 512-token middle
GEN_RESERVE = 512  # canvas positions the default budget leaves to the middle (at most a quarter)


def default_model_dir() -> Path:
    return Path(os.environ.get("LLADA_MODEL") or EMBEDDED_DIR)


def default_prompt_budget(family: str, max_len: int) -> int:
    """The prompt tokens of a model when none are asked for: what the embedded model was trained
    on, else 4,096, leaving the middle GEN_RESERVE positions (at most a quarter) of the canvas."""
    room = max_len - min(GEN_RESERVE, max_len // 4)
    return min(EMBEDDED_MAX_PROMPT if family == "embedded" else REAL_MAX_PROMPT, room)


class TextEngine:
    def __init__(self, model_dir: str | Path | None = None, *, preset: str = DEFAULT_PRESET, device: str = "cpu",
                 max_len: int | None = None, prompt_cache_entries: int = 4,
                 max_prompt_tokens: int | None = None, threads: int | None = None, max_threads: int | None = None,
                 trust_remote_code: bool = False, dtype: torch.dtype | None = None,
                 prompt_template: str | Path | None = None, prompt_format: str = "auto") -> None:
        """`model_dir`: a checkpoint directory or a Hugging Face name found in the local cache
        (the embedded model by default). Any family `engine.model.loader` knows loads here.
        `max_len` (canvas) and `max_prompt_tokens` default per model (`default_prompt_budget`);
        `prompt_template`: a Jinja file that replaces the model's prompt format (docs/models.md);
        `prompt_format`: "auto" (the checkpoint's files decide: chat when it ships a chat template),
        "chat" or "plain" (an instruct checkpoint without a template, a base one with one).
        `threads`: torch's CPU threads, fixed; None: sized for the machine and re-checked while
        the loop runs, at most `max_threads` (engine.model.threads)."""
        # torch's CPU threads: `threads` fixed, else sized for the machine and re-checked by the
        # step loop (engine.model.threads); chosen here, on the thread that runs the ops
        self.threads = ThreadGovernor(fixed=threads or None, cap=max_threads)
        if str(device).startswith("cpu"):
            self.threads.start()
        else:
            self.threads.fixed = self.threads.fixed or torch.get_num_threads()
        self.loaded = load_model(model_dir or default_model_dir(), device=device, dtype=dtype,
                                 trust_remote_code=trust_remote_code, max_len=max_len or REAL_MAX_LEN)
        self.model_dir = self.loaded.path
        kernels.warm_up(device)  # what the first request's step would otherwise time
        # every family's model has the native model's decoding interface (engine.model.adapters)
        self.model = cast(Transformer, self.loaded.model)
        self.config = self.loaded.config
        embedded = self.loaded.family == "embedded"
        default_len = EMBEDDED_MAX_LEN if embedded else REAL_MAX_LEN
        self.max_len = min(max_len or default_len, self.config.max_seq_len)
        self.model.setup_cache(1, self.max_len)
        self.tok = load_tokenizer(self.loaded.tokenizer_path)
        self.bidirectional = self.config.attention == "bidirectional"
        # suffix-first FIM when the model has the markers; else the chat template with prefix and
        # suffix (engine.prompt.prompt_format); a base checkpoint without either gets the prefix, and a
        # bidirectional one the suffix after the masked middle
        special = self.loaded.special
        fim = min(special.fim_prefix, special.fim_suffix, special.fim_middle) >= 0
        fmt = load_prompt_format(self.loaded.tokenizer_path, self.tok, fim, prompt_template, prompt_format)
        self.max_prompt_tokens = min(max_prompt_tokens, self.max_len - 1) if max_prompt_tokens \
            else default_prompt_budget(self.loaded.family, self.max_len)
        texts = [self.tok.decode([i]) for i in range(self.tok.get_vocab_size())]
        self.special_ids = frozenset(special_id_set(self.tok, special))
        self.healing = Healing(texts, set(self.special_ids), rows=self.config.vocab_size,  # the logits' width
                               decode=self.tok.decode)
        # known names as token paths (engine.prompt.name_trie); not for chat answers, which
        # need not start at the cursor
        self.name_paths = NamePaths(texts, self.special_ids, self.config.vocab_size, self.tok, special.mask,
                                    enabled=fmt.kind not in ("chat", "template"))
        self.prompts = PromptBuilder(self.tok, special, fmt, self.max_prompt_tokens, self.bidirectional, self.healing)
        self.format, self.fim, self.end_ids = fmt, self.prompts.fim, self.prompts.end_ids
        # the ids decoding stops at: the format's ends plus every end the checkpoint's files name
        # (engine.model.loader.end_id_sources; a real checkpoint's pad token too)
        turn_ends = {t: i for t in fmt.end_texts if (i := self.tok.token_to_id(t)) is not None}
        self.end_sources = end_id_sources(self.loaded.path, self._checkpoint_config(), special, turn_ends,
                                          pad_ends=not embedded)
        self.stop_ids = frozenset(self.end_ids | set(self.end_sources))
        self.sp = special
        if self.prompts.turn_end is not None and self.prompts.turn_end != special.end_of_middle:
            # answers end at the format's end-of-turn token: the decoder's end-of-middle becomes it
            self.sp = replace(special, end_of_middle=self.prompts.turn_end)
            self.model.config = replace(self.model.config, special=self.sp)  # type: ignore[assignment]
        self.exact_cache = self.loaded.cache == "exact"
        self.preset = preset  # the preset of a plan that names none
        self.prompt_cache = PromptCache(prompt_cache_entries)
        self._lock = threading.Lock()
        self._loop: Scheduler | None = None

    def _checkpoint_config(self) -> dict[str, Any]:
        f = self.loaded.path / "config.json"
        return json.loads(f.read_text(encoding="utf-8")) if f.exists() else {}

    def info(self) -> dict[str, Any]:
        """The model and its budgets; "mode" is the engine's default preset (that of a plan
        naming none, `--mode` of the engine CLI), not the last request's: each request's plan
        names its own (the language server's always does)."""
        return {"model": self.model_dir.name, "path": str(self.model_dir), "family": self.loaded.family,
                "prompt_format": self.format.kind, "prompt_template": self.format.source,
                "prompt_reason": self.format.reason,
                "max_len": self.max_len, "block_size": self.config.block_size,
                "vocab_size": self.config.vocab_size, "mode": self.preset, "max_prompt_tokens": self.max_prompt_tokens,
                "max_context_tokens": self.prompts.max_context_tokens,  # the workspace context's share
                "params": sum(p.numel() for p in self.model.parameters()),
                "threads": self.threads.threads, "threads_fixed": bool(self.threads.fixed),
                "dtype": str(next(self.model.parameters()).dtype).removeprefix("torch.")}

    # -- prompt ----------------------------------------------------------------------------
    def encode(self, prefix: str, suffix: str, heal: bool = True, doc_key: str = ""
               ) -> tuple[list[int], str, torch.Tensor | None]:
        """The prompt ids, the healed partial-token text and the first token's allowed set."""
        ids, _suffix, partial, allowed = self.layout(prefix, suffix, heal, doc_key)
        return ids, partial, allowed

    def layout(self, prefix: str, suffix: str, heal: bool = True, doc_key: str = "",
               context: tuple[ContextChunk, ...] = ()) -> tuple[list[int], list[int], str, torch.Tensor | None]:
        """Prompt ids and (for bidirectional models) the suffix ids that follow the masked
        middle, trimmed to the budget; plus token healing's backed-off text and allowed set
        (engine.prompt.builder)."""
        lay = self.prompts.layout(prefix, suffix, heal, doc_key, context)
        return lay.ids, lay.suffix, lay.partial, lay.allowed

    # -- decoding ---------------------------------------------------------------------------
    def prepare(self, req: CompletionRequest, row: int, policy: Policy | None = None) -> tuple[Sequence, str, int]:
        """Encode `req`, restore its longest cached prompt prefix into cache `row` and build
        its decoding state; returns (sequence, healed partial token text, reused tokens). The
        plan's preset is decided before (`engine.api.decided`, by `Scheduler.submit`): an
        undecided plan without a `policy` is refused, never given a default here."""
        plan = req.plan
        if policy is None:
            if plan.preset is None:
                raise ValueError("the plan names no preset: decide it once with engine.api.decided "
                                 "(the step loop does, Scheduler.submit)")
            policy = policy_for(self.model, plan.preset)
        ids, suffix, partial, allowed = self.layout(req.prefix, req.suffix, doc_key=req.doc_key,
                                                    context=req.context)
        names = self._names(req, partial) if req.names is not None and req.names.names else None
        if names is not None and partial and names.covered < len(set(req.names.names)):  # type: ignore[union-attr]
            # healing's backed-off text is longer than any token some names start with: without
            # healing every name has a path (the trie constrains the first token instead)
            plain = self._names(req, "")
            if plain is not None and plain.covered > names.covered:
                ids, suffix, partial, allowed = self.layout(req.prefix, req.suffix, heal=False, doc_key=req.doc_key,
                                                            context=req.context)
                names = plain
        reused = self.prompt_cache.restore(self.model, row, req.doc_key, ids) if self.exact_cache else 0
        max_new = max(1, min(plan.max_tokens, (self.max_len - len(ids) - len(suffix) - 2) // 2))
        seq = make_sequence(self.model, ids, policy, max_new, suffix=suffix, row=row, reused=reused,
                            max_len=self.max_len, first_allowed=allowed, stop_fn=self._stop_fn(plan, partial))
        seq.end_ids = self.stop_ids  # any end id ends the completion (<|endoftext|> as well as the turn's end)
        seq.names = names
        return seq, partial, seq.reused

    def _names(self, req: CompletionRequest, partial: str) -> NameConstraint | None:
        assert req.names is not None
        return self.name_paths.constraint(req.prefix, req.names, partial)

    def loop(self) -> Scheduler:
        """This engine's step loop for callers in one thread (created on first use): a request
        and its preset's alternatives at once (`engine.decoding.local.LOCAL_ROWS`), no deadline of its
        own (the caller keeps time), remask memory as the daemon's."""
        if self._loop is None:
            self._loop = Scheduler(self, max_batch=local.LOCAL_ROWS, deadline_s=math.inf, threads=self.threads)
        return self._loop

    def complete(self, req: CompletionRequest, cancel: threading.Event | None = None,
                 policy: Policy | None = None) -> Iterator[EngineEvent]:
        """Decode `req` on this engine's loop in the calling thread, yielding text events;
        `cancel` is checked between forwards. `policy` overrides the plan's preset (benches)."""
        with self._lock:
            yield from local.complete(self.loop(), req, cancel, policy)

    def remask(self, request_id: str, spans: list[tuple[int, int]],
               cancel: threading.Event | None = None) -> Iterator[EngineEvent]:
        """Send the tokens overlapping character `spans` of a finished request's text back to
        [MASK] and decode them again (the syntax-guided edit of the language server)."""
        with self._lock:
            yield from local.remask(self.loop(), request_id, spans, cancel)

    def fork(self, req: CompletionRequest, token: int, row: int, policy: Policy | None = None) -> Sequence:
        """A candidate of `req` on cache row `row` whose first token is `token` (engine.decoding.alternatives);
        its prompt comes from the prompt cache when the primary stored it."""
        seq, _partial, _reused = self.prepare(req, row, policy)
        seq.first_allowed = only(token, self.config.vocab_size)
        if seq.names is not None:
            seq.names.keep_own_above = math.inf  # a fork of a constrained primary decodes a listed name
        return seq

    def alternative_texts(self, req: CompletionRequest, forks: list[Sequence], partial: str, primary: str
                          ) -> tuple[str, ...]:
        """The forks' final texts in rank order, without the primary's text and repeats."""
        out: list[str] = []
        for f in forks:
            text = self.final_text(f, req.plan, partial)
            if text != primary and text not in out:
                out.append(text)
        return tuple(out)

    def _stop_fn(self, plan: Plan, partial: str):  # noqa: ANN202 - a closure over the tokenizer
        if plan.stop == "none" and plan.max_lines == 0:
            return None

        def fn(tokens: list[int]) -> int | None:
            text = self.tok.decode(tokens)[len(partial):]
            if stop_index(text, plan) is None:
                return None
            for k in range(1, len(tokens) + 1):  # the first token whose text reaches the cut
                if stop_index(self.tok.decode(tokens[:k])[len(partial):], plan) is not None:
                    return k
            return len(tokens)
        return fn

    def text(self, seq: Sequence, plan: Plan, partial: str) -> str:
        """The text `seq` shows now (its drafts and edits), after healing's `partial`, cut at the stop rule."""
        return self._answer(seq, seq.shown_tokens(), plan, partial)

    def _answer(self, seq: Sequence, toks: list[int], plan: Plan, partial: str) -> str:
        # the cursor's line (decoded from the prompt) matters only to an answer the format wraps:
        # the loop asks for every row's text at every step
        tail = self.prompts.tail_of(seq.prompt, partial) if self.format.wraps_answer else ""
        return self.prompts.answer(toks, plan, partial, tail)

    def final_text(self, seq: Sequence, plan: Plan, partial: str) -> str:
        """The text of the finished `seq`."""
        return self._answer(seq, list(seq.final_middle()), plan, partial)

    def positions_for(self, seq: Sequence, partial: str, spans: list[tuple[int, int]]) -> list[int]:
        """Middle positions whose token text overlaps character `spans` of the completion."""
        positions, off = [], -len(partial)
        for i, t in enumerate(seq.final_middle()):
            n = len(self.tok.decode([t]))
            if any(off < e and off + n > s for s, e in spans):
                positions.append(i)
            off += n
        return positions
