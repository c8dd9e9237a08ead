"""Next-edit suggestions: edit-only (T2T) passes over an existing region of code.

The region is tokenized and laid on the canvas as a committed draft (no masks), right after
the prompt the engine builds for a completion at the region's start (suffix-first FIM for the
embedded models: `[fim_suffix] suffix [fim_prefix] prefix [fim_middle]`, then the region),
padded to whole blocks with end-of-middle tokens as the model was trained. Each forward is one
edit pass over the whole region, the multi-block pass of `engine.decoding.decode`: a clean
rewrite of the region's blocks plus a noisy copy of each block, which reads the prompt, the
clean blocks before it and itself, so every block is judged with the full left context over
the exact KV cache, in one forward however many blocks the region spans (fully bidirectional
models: one full forward over prompt, region and suffix). The first pass also prefills the
prompt. A replaced token stays replaced (later passes read it); passes stop at the first one
that changes nothing, or after `max_passes`. The edit rule is `policies.edit_only.EditOnly`.

The finished canvas is compared with the draft token by token: adjacent replaced tokens
merge into one `EditSuggestion` over the characters of the region they cover (widened to
whole characters where a byte-level token splits one), trimmed to the characters that change;
its confidence is the lowest probability of its new tokens.

Next-edit requests live in their own document-key namespace (`next_edit_doc`): a next-edit
request supersedes an earlier next-edit request of the same document, never a completion.
"""

from __future__ import annotations

import bisect
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import torch
from torch import Tensor, nn

from engine.api import (
    EditSuggestion,
    EngineEvent,
    NextEditRequest,
    TextEdit,
    apply_edits,
    diff_edits,
)
from engine.decoding.decode import Feed, Sequence, Staged, TokenEvent
from engine.decoding.decode_bidir import BidirSequence, Refresh
from engine.decoding.policies import Policy
from engine.model.native import CLEAN, ModelConfig
from kernels import Confidence

if TYPE_CHECKING:
    from engine.service import TextEngine

NEXT_EDIT_NS = "\0next-edit\0"  # the document-key namespace of next-edit requests
MAX_REGION_TOKENS = 512  # a region's tokens at most (the canvas holds it twice in a pass)


def next_edit_doc(doc_key: str) -> str:
    """The key a next-edit request of document `doc_key` supersedes by (and caches its prompt
    under): apart from the document's completions."""
    return NEXT_EDIT_NS + doc_key


class Decoder(Protocol):
    def decode(self, ids: list[int]) -> str: ...


@dataclass(frozen=True)
class RegionTokens:
    """A region's tokens and the character offset of every token that starts on a character
    boundary (`cuts`: token index -> offset; `len(ids)` -> `len(text)` always)."""

    text: str
    ids: list[int]
    cuts: dict[int, int]


def tokenize_region(tok: Any, text: str) -> RegionTokens:
    """`text`'s tokens (`tok`: a `tokenizers.Tokenizer`) and their character boundaries, found by
    decoding: a token index is a cut when the tokens since the last cut decode to the text that
    follows it (a byte-level token that splits a character is no cut)."""
    ids: list[int] = tok.encode(text, add_special_tokens=False).ids if text else []
    n = len(ids)
    cuts = {0: 0}
    if tok.decode(ids) != text:  # a normalizing tokenizer: the region is one unit
        return RegionTokens(text, ids, {0: 0, n: len(text)})
    last_k, last_c = 0, 0
    for k in range(1, n + 1):
        piece = tok.decode(ids[last_k:k])
        if piece and text.startswith(piece, last_c):
            last_k, last_c = k, last_c + len(piece)
            cuts[k] = last_c
    cuts[n] = len(text)
    return RegionTokens(text, ids, cuts)


def suggestions_of(region: RegionTokens, final: list[int], conf: list[float], tok: Decoder
                   ) -> tuple[EditSuggestion, ...]:
    """The draft's replaced tokens as character-level suggestions against `region.text`."""
    ids, cuts = region.ids, region.cuts
    at = sorted(cuts)
    runs: list[tuple[int, int, list[int]]] = []  # (first token, end token, changed positions)
    for i in (i for i in range(len(ids)) if final[i] != ids[i]):
        j = bisect.bisect_right(at, i)
        a, b = at[j - 1], at[j]
        if runs and a <= runs[-1][1]:
            runs[-1] = (runs[-1][0], max(b, runs[-1][1]), [*runs[-1][2], i])
        else:
            runs.append((a, b, [i]))
    out: list[EditSuggestion] = []
    for a, b, changed in runs:
        start, end = cuts[a], cuts[b]
        old, new = region.text[start:end], tok.decode(final[a:b])
        if old == new:
            continue
        p = 0
        while p < min(len(old), len(new)) and old[p] == new[p]:
            p += 1
        s = 0
        while s < min(len(old), len(new)) - p and old[len(old) - 1 - s] == new[len(new) - 1 - s]:
            s += 1
        out.append(EditSuggestion(start + p, end - s, new[p: len(new) - s], min(conf[i] for i in changed)))
    return tuple(out)


def rewritten(text: str, suggestions: tuple[EditSuggestion, ...]) -> str:
    """`text` with every suggestion applied."""
    return apply_edits(text, [TextEdit(s.start, s.end, s.text) for s in suggestions])


class _Draft(Sequence):
    """Edit passes over a committed draft: the done reason says whether the passes reached a
    fixed point (`end_of_middle`: a pass changed nothing) or ran out (`budget`)."""

    def commit(self, st: Staged, conf: Confidence) -> TokenEvent:
        ev = super().commit(st, conf)
        if self.phase == "done":
            self.reason = "budget" if ev.edits else "end_of_middle"
        return ev


class EditSequence(_Draft):
    """A block-causal draft: each forward is a multi-block pass (`Sequence._prepare_multi`);
    the first also feeds the prompt's uncached tokens and, with shifted logits, the last prompt
    token, whose logits predict the region's first token (kept for later passes)."""

    _fed_head = False

    def prepare(self) -> Feed:
        f = self._prepare_multi()
        a0 = self.P - self.lead
        head = self.shift and self.first_head is None
        start = min(self.clean_len, self.P - 1) if head else self.clean_len
        self._fed_head = head
        if start >= a0:
            return f
        pre = Feed.empty()
        for p in range(start, a0):
            pre.add(self.prompt[p], p, p, CLEAN, (p // self.b) * self.b if self.align else -1)
        k = len(pre.ids)
        out = Feed(pre.ids + f.ids, pre.pos + f.pos, pre.slots + f.slots, pre.kind + f.kind, pre.blk + f.blk,
                   ([k - 1] if head else []) + [x + k for x in f.logits_at], f.kv_len)
        return out

    def stage(self, logits: Tensor) -> Staged:
        if self._fed_head:
            self.first_head, logits = logits[0], logits[1:]
            self._fed_head = False
        return super().stage(logits)


class BidirEditSequence(_Draft, BidirSequence):
    """A fully bidirectional model's draft: every pass is one full forward (prompt, region,
    suffix), the multi-block pass of `BidirSequence`."""


def load_draft(seq: Sequence, ids: list[int]) -> None:
    """Lay `ids` on `seq`'s canvas as committed tokens, end-of-middle padding after them, and
    start the edit passes."""
    n = len(ids)
    seq.middle[:n] = torch.tensor(ids, dtype=torch.long)
    seq.middle[n:] = seq.sp.end_of_middle
    seq.committed[:] = True
    seq.commit_conf[:n] = 1.0
    seq.end, seq.reason = n, "end_of_middle"
    seq.phase, seq.multi_pass = "multi", 0


def make_edit_sequence(model: nn.Module, prompt: list[int], suffix: list[int], policy: Policy, ids: list[int],
                       row: int, reused: int, max_len: int) -> Sequence:
    """The edit-pass state of a region `ids` for `model`'s attention regime."""
    c: ModelConfig = model.config  # type: ignore[assignment]
    seq: Sequence
    if c.attention == "bidirectional":
        refresh: Refresh = "step" if len(getattr(model, "layers", [])) == 0 else "block"
        seq = BidirEditSequence(prompt, suffix, c.special, policy, c.block_size, len(ids), c.shift_logits,
                                row=row, refresh=refresh, max_len=max_len)
    else:
        seq = EditSequence(prompt, c.special, policy, c.block_size, len(ids), c.shift_logits, row=row,
                           reused=reused, max_len=max_len, align=bool(getattr(model, "aligned_blocks", False)))
    load_draft(seq, ids)
    return seq


class NextEditStream:
    """A next-edit request's text view of its passes: an `edit` event for each pass that changed
    the region's text (the region rewritten so far), then `done` with the suggestions."""

    def __init__(self, engine: TextEngine, req: NextEditRequest, seq: Sequence, region: RegionTokens,
                 t0: float, reused: int, queue_ms: float) -> None:
        self.engine, self.req, self.seq, self.region = engine, req, seq, region
        self.t0, self.reused, self.queue_ms = t0, reused, queue_ms
        self.prev = region.text

    def suggestions(self) -> tuple[EditSuggestion, ...]:
        n = len(self.region.ids)
        return suggestions_of(self.region, self.seq.middle[:n].tolist(), self.seq.commit_conf[:n].tolist(),
                              self.engine.tok)

    def feed(self, ev: TokenEvent) -> EngineEvent | None:
        if not ev.edits:
            return None
        text = rewritten(self.region.text, self.suggestions())
        if text == self.prev:
            return None
        prev, self.prev = self.prev, text
        return EngineEvent("edit", self.req.request_id, text, diff_edits(prev, text), ev.step, True)

    def finish(self, ev: TokenEvent, extra: dict[str, Any] | None = None, forks: object = None) -> EngineEvent:
        """The done event; a cancelled or superseded request suggests nothing."""
        seq, n = self.seq, len(self.region.ids)
        keep = ev.reason not in ("cancelled", "superseded")
        sugg = self.suggestions() if keep else ()
        text = rewritten(self.region.text, sugg)
        total = (time.perf_counter() - self.t0) * 1000
        fw = seq.tally.forwards
        stats = {"forwards": fw, "tokens": n, "tpf": n / max(1, fw), "primary_forwards": seq.forwards,
                 "passes": seq.multi_pass, "edited_tokens": int((seq.middle[:n] != torch.tensor(self.region.ids)).sum()),
                 "prefill_tokens": len(seq.prompt) - self.reused, "reused_tokens": self.reused,
                 "queue_ms": self.queue_ms, "first_draft_ms": total, "total_ms": total, **(extra or {})}
        return EngineEvent("done", self.req.request_id, text, diff_edits(self.prev, text), seq.forwards, True,
                           reason=ev.reason, stats=stats, suggestions=sugg)
