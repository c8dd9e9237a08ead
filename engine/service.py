"""The text-level engine: tokenizes requests, decodes, and turns token events into text events.

`TextEngine.complete` is a synchronous generator that runs the model in the calling thread
(one request at a time; the daemon's scheduler batches many). It checks `cancel` between
forwards. Text never crosses the stop rule: the tokens after it are not reported.
"""

from __future__ import annotations

import bisect
import os
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import torch

from engine.alternatives import alternatives_for, group_stats, only, run_group
from engine.api import CompletionRequest, EngineEvent, EventKind, Plan, diff_edits
from engine.checkpoint import EMBEDDED_DIR
from engine.decode import Sequence, TokenEvent
from engine.decode_bidir import make_sequence, run
from engine.loader import load_model
from engine.model import Transformer
from engine.policies import Policy, make_policy
from engine.prompt_cache import PromptCache
from engine.stops import cut_text, stop_index
from engine.tokenizer import load_tokenizer
from engine.window import char_window, token_window

DEFAULT_MAX_PROMPT = 448  # the embedded model trained on <= 128 suffix + 320 prefix tokens
SUFFIX_SHARE = 0.28
FINISHED_KEPT = 16  # finished requests that remask can still reach
HEALABLE = re.compile(r" ?[A-Za-z_][A-Za-z0-9_]*|[A-Za-z0-9_]+")  # a word fragment at the cursor


def default_model_dir() -> Path:
    return Path(os.environ.get("LLADA_MODEL") or EMBEDDED_DIR)


class Healing:
    """Token healing: back off a prompt's partial last token and constrain the first new one.

    The tokens that extend a partial text are found by binary search over the vocabulary's
    texts in sorted order (a 150k vocabulary scanned per keystroke would cost tens of ms);
    the answers are kept in a bounded LRU."""

    MAX_CACHED = 1024

    def __init__(self, vocab_texts: list[str], n_special: int) -> None:
        self.texts, self.size = vocab_texts, len(vocab_texts)
        order = sorted((t, i) for i, t in enumerate(vocab_texts) if i >= n_special)
        self._keys = [t for t, _ in order]
        self._ids = [i for _, i in order]
        self._cache: OrderedDict[str, torch.Tensor | None] = OrderedDict()

    def allowed(self, partial: str) -> torch.Tensor | None:
        """bool [V]: the non-special tokens whose text starts with `partial`; None when no
        token is longer than it (nothing to heal)."""
        if partial in self._cache:
            self._cache.move_to_end(partial)
            return self._cache[partial]
        lo = hi = bisect.bisect_left(self._keys, partial)
        longer = False
        while hi < len(self._keys) and self._keys[hi].startswith(partial):
            longer = longer or len(self._keys[hi]) > len(partial)
            hi += 1
        res = None
        if longer:
            res = torch.zeros(self.size, dtype=torch.bool)
            res[self._ids[lo:hi]] = True
        self._cache[partial] = res
        while len(self._cache) > self.MAX_CACHED:
            self._cache.popitem(last=False)
        return res


class TextEngine:
    def __init__(self, model_dir: str | Path | None = None, *, mode: str = "speedy", device: str = "cpu",
                 max_len: int = 2048, prompt_cache_entries: int = 4,
                 max_prompt_tokens: int = DEFAULT_MAX_PROMPT, threads: int | None = None,
                 trust_remote_code: bool = False, dtype: torch.dtype | None = None) -> None:
        """`model_dir`: a checkpoint directory or a Hugging Face name found in the local cache
        (the embedded model by default). Any family `engine.loader` knows loads here."""
        if threads:
            torch.set_num_threads(threads)
        self.loaded = load_model(model_dir or default_model_dir(), device=device, dtype=dtype,
                                 trust_remote_code=trust_remote_code)
        self.model_dir = self.loaded.path
        # every family's model has the native model's decoding interface (engine.adapters)
        self.model = cast(Transformer, self.loaded.model)
        self.config = self.loaded.config
        self.max_len = min(max_len, self.config.max_seq_len)
        self.model.setup_cache(1, self.max_len)
        self.tok = load_tokenizer(self.loaded.tokenizer_path)
        self.sp = self.loaded.special
        # suffix-first FIM when the model has the markers; a bidirectional model reads the
        # suffix after the masked middle; otherwise the prompt is the prefix alone
        self.bidirectional = self.config.attention == "bidirectional"
        self.fim = min(self.sp.fim_prefix, self.sp.fim_suffix, self.sp.fim_middle) >= 0
        self.exact_cache = self.loaded.cache == "exact"
        self.mode = mode
        self.max_prompt_tokens = max_prompt_tokens
        self.prompt_cache = PromptCache(prompt_cache_entries)
        n_special = 1 + max(v for v in self.sp.__dict__.values() if v < self.tok.get_vocab_size())
        texts = [self.tok.decode([i]) for i in range(self.tok.get_vocab_size())]
        self.healing = Healing(texts, n_special)
        self._lock = threading.Lock()
        # finished requests by id, for remask (a few: their sequences hold the whole state)
        self.finished: OrderedDict[str, tuple[CompletionRequest, Sequence, str]] = OrderedDict()

    def info(self) -> dict[str, Any]:
        return {"model": self.model_dir.name, "path": str(self.model_dir), "family": self.loaded.family,
                "block_size": self.config.block_size,
                "vocab_size": self.config.vocab_size, "mode": self.mode, "max_prompt_tokens": self.max_prompt_tokens,
                "params": sum(p.numel() for p in self.model.parameters()),
                "dtype": str(next(self.model.parameters()).dtype).removeprefix("torch.")}

    # -- prompt ----------------------------------------------------------------------------
    def encode(self, prefix: str, suffix: str, heal: bool = True) -> tuple[list[int], str, torch.Tensor | None]:
        """The prompt ids, the healed partial-token text and the first token's allowed set."""
        ids, _suffix, partial, allowed = self.layout(prefix, suffix, heal)
        return ids, partial, allowed

    def layout(self, prefix: str, suffix: str, heal: bool = True) -> tuple[list[int], list[int], str, torch.Tensor | None]:
        """Prompt ids and (for bidirectional models) the suffix ids that follow the masked
        middle, trimmed to the budget; plus token healing's backed-off text and allowed set."""
        sp = self.sp
        # the prefix's cuts move in quanta (engine.window): typing keeps the prompt's start
        pre = self.tok.encode(char_window(prefix, self.max_prompt_tokens * 6)).ids if prefix else []
        suf = self.tok.encode(suffix[: self.max_prompt_tokens * 6]).ids if suffix else []
        budget = self.max_prompt_tokens - 3
        suf = suf[: max(0, min(len(suf), int(budget * SUFFIX_SHARE)))]
        pre = token_window(pre, budget - len(suf))
        partial, allowed = "", None
        if heal and pre:
            # back off the trailing word fragment (up to 3 tokens) if some token extends it
            for k in range(min(3, len(pre)), 0, -1):
                tail = self.tok.decode(pre[-k:])
                if 0 < len(tail) <= 24 and HEALABLE.fullmatch(tail):
                    allowed = self.healing.allowed(tail)
                    if allowed is not None:
                        partial, pre = tail, pre[:-k]
                        break
        if self.bidirectional:
            return (pre or [sp.end_of_text]), suf, partial, allowed
        if self.fim:
            return [sp.fim_suffix, *suf, sp.fim_prefix, *pre, sp.fim_middle], [], partial, allowed
        return (pre or [sp.end_of_text]), [], partial, allowed

    # -- decoding ---------------------------------------------------------------------------
    def prepare(self, req: CompletionRequest, row: int, policy: Policy | None = None) -> tuple[Sequence, str, int]:
        """Encode `req`, restore its longest cached prompt prefix into cache `row` and build
        its decoding state; returns (sequence, healed partial token text, reused tokens)."""
        plan = req.plan
        ids, suffix, partial, allowed = self.layout(req.prefix, req.suffix)
        policy = policy or make_policy(plan.preset or self.mode)
        reused = self.prompt_cache.restore(self.model, row, req.doc_key, ids) if self.exact_cache else 0
        max_new = max(1, min(plan.max_tokens, (self.max_len - len(ids) - len(suffix) - 2) // 2))
        seq = make_sequence(self.model, ids, policy, max_new, suffix=suffix, row=row, reused=reused,
                            max_len=self.max_len, first_allowed=allowed, stop_fn=self._stop_fn(plan, partial))
        return seq, partial, seq.reused

    def complete(self, req: CompletionRequest, cancel: threading.Event | None = None,
                 policy: Policy | None = None) -> Iterator[EngineEvent]:
        """Decode `req`, yielding text events. `policy` overrides the plan's preset (benches)."""
        with self._lock:
            yield from self._complete(req, cancel, policy)

    def _complete(self, req: CompletionRequest, cancel: threading.Event | None,
                  policy: Policy | None = None) -> Iterator[EngineEvent]:
        t0 = time.perf_counter()
        n = alternatives_for(req.plan, self.mode)
        if n > 1 and self.model.cache_batch < n:  # before prepare: a new cache drops row 0
            self.model.setup_cache(n, self.max_len)
        seq, partial, reused = self.prepare(req, 0, policy)
        yield from self._run(req, seq, partial, t0, reused, cancel, n, policy)

    def fork(self, req: CompletionRequest, token: int, row: int, policy: Policy | None = None) -> Sequence:
        """A candidate of `req` on cache row `row` whose first token is `token` (engine.alternatives);
        its prompt comes from the prompt cache when the primary stored it."""
        seq, _partial, _reused = self.prepare(req, row, policy)
        seq.first_allowed = only(token, self.config.vocab_size)
        return seq

    def alternative_texts(self, req: CompletionRequest, forks: list[Sequence], partial: str, primary: str
                          ) -> tuple[str, ...]:
        """The forks' final texts in rank order, without the primary's text and repeats."""
        out: list[str] = []
        for f in forks:
            text = self._final_text(f, req.plan, partial)
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

    def _text(self, seq: Sequence, plan: Plan, partial: str) -> str:
        unc = (~seq.committed).nonzero()
        upto = int(unc[0]) if unc.numel() else seq.cap
        upto = min(upto, seq.live_limit())
        toks = [t for t in seq.middle[:upto].tolist() if t != self.sp.end_of_middle]
        text = self.tok.decode(toks)
        text = text[len(partial):] if text.startswith(partial) else text
        return cut_text(text, plan)[0]

    def _run(self, req: CompletionRequest, seq: Sequence, partial: str, t0: float, reused: int,
             cancel: threading.Event | None, n: int = 1, policy: Policy | None = None) -> Iterator[EngineEvent]:
        prompt = seq.prompt

        def store(s: Sequence) -> None:
            if self.exact_cache:
                self.prompt_cache.store(self.model, s.row, req.doc_key, prompt)

        stream = TextStream(self, req, seq, partial, t0, reused, (time.perf_counter() - t0) * 1000)
        ev: TokenEvent
        stop = cancel.is_set if cancel else None
        forks: list[Sequence] = []
        if n > 1:
            events = run_group(self.model, seq, n, lambda tok, row: self.fork(req, tok, row, policy), self.max_len,
                               cancel=stop, on_prefilled=store, forks=forks)
        else:
            events = run(self.model, seq, self.max_len, cancel=stop, on_prefilled=store)
        for ev in events:
            if ev.kind == "done":
                self.finished[req.request_id] = (req, seq, partial)
                self.finished.move_to_end(req.request_id)
                while len(self.finished) > FINISHED_KEPT:
                    self.finished.popitem(last=False)
                yield stream.finish(ev, group_stats(seq, forks) if n > 1 else None, forks)
                return
            out = stream.feed(ev)
            if out is not None:
                yield out

    def _final_text(self, seq: Sequence, plan: Plan, partial: str) -> str:
        toks = [t for t in seq.final_middle() if t != self.sp.end_of_middle]
        text = self.tok.decode(toks)
        text = text[len(partial):] if text.startswith(partial) else text
        return cut_text(text, plan)[0]

    def positions_for(self, seq: Sequence, partial: str, spans: list[tuple[int, int]]) -> list[int]:
        """Middle positions whose token text overlaps character `spans` of the completion."""
        positions, off = [], -len(partial)
        for i, t in enumerate(seq.final_middle()):
            n = len(self.tok.decode([t]))
            if any(off < e and off + n > s for s, e in spans):
                positions.append(i)
            off += n
        return positions

    def remask(self, request_id: str, spans: list[tuple[int, int]],
               cancel: threading.Event | None = None) -> Iterator[EngineEvent]:
        """Send the tokens overlapping character `spans` of the last completion's text back to
        [MASK] and decode them again (the syntax-guided edit of the language server)."""
        with self._lock:
            if request_id not in self.finished:
                yield EngineEvent("error", request_id, "", error="unknown or expired request id")
                return
            req, seq, partial = self.finished[request_id]
            positions = self.positions_for(seq, partial, spans)
            t0 = time.perf_counter()
            reused = self.prompt_cache.restore(self.model, seq.row, req.doc_key, seq.prompt) if self.exact_cache else 0
            seq.remask(positions, reused)
            yield from self._run(req, seq, partial, t0, reused, cancel)


class TextStream:
    """One request's text view of its token events: drafts until the first complete draft of
    the span, then edits, then done with timings. Shared by `TextEngine` and the scheduler."""

    def __init__(self, engine: TextEngine, req: CompletionRequest, seq: Sequence, partial: str,
                 t0: float, reused: int, queue_ms: float) -> None:
        self.engine, self.req, self.seq, self.partial = engine, req, seq, partial
        self.t0, self.reused, self.queue_ms = t0, reused, queue_ms
        self.prev = ""
        self.first_draft_ms: float | None = None

    def feed(self, ev: TokenEvent) -> EngineEvent | None:
        """The text event of one forward's token event, or None when the text did not change."""
        text = self.engine._text(self.seq, self.req.plan, self.partial)
        rid, prev = self.req.request_id, self.prev
        if self.first_draft_ms is None and ev.complete:
            self.first_draft_ms = (time.perf_counter() - self.t0) * 1000
            self.prev = text
            return EngineEvent("draft", rid, text, diff_edits(prev, text), ev.step, True)
        if text == prev:
            return None
        self.prev = text
        kind: EventKind = "draft" if self.first_draft_ms is None else "edit"
        return EngineEvent(kind, rid, text, diff_edits(prev, text), ev.step, self.first_draft_ms is not None)

    def finish(self, ev: TokenEvent, extra: dict[str, Any] | None = None,
               forks: list[Sequence] | None = None) -> EngineEvent:
        seq = self.seq
        text = self.engine._final_text(seq, self.req.plan, self.partial)
        alts = self.engine.alternative_texts(self.req, forks, self.partial, text) \
            if forks and ev.reason != "cancelled" else ()
        total = (time.perf_counter() - self.t0) * 1000
        n_tok = len(seq.final_middle())
        stats = {"forwards": seq.forwards, "tokens": n_tok, "tpf": n_tok / max(1, seq.forwards),
                 "prefill_tokens": len(seq.prompt) - self.reused, "reused_tokens": self.reused,
                 "queue_ms": self.queue_ms,
                 "first_draft_ms": self.first_draft_ms if self.first_draft_ms is not None else total,
                 "total_ms": total, **(extra or {})}
        return EngineEvent("done", self.req.request_id, text, diff_edits(self.prev, text), seq.forwards, True,
                           reason=ev.reason, stats=stats, alternatives=alts)
