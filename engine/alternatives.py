"""Alternatives: one request decoded from each of its most likely first tokens, side by side.

The first token of a short completion decides most of it, and a small model's first choice is
often a line that does not fit (an unfinished call, a keyword in the wrong place). The primary
sequence decodes as usual; once its first draft is complete the engine forks up to n - 1
sequences whose middle index 0 is forced to the 2nd..n-th most likely token of its first step (token healing's
allowed set included). The forks restore the prompt's KV from the prompt cache into their own
cache rows and advance in the same batched forwards as the primary, so n candidates cost one
prefill and ~n rows a step, not n requests. The forwards they run after the primary has
finished are the request's too: its `stats.forwards` (the shared `decode.Tally`) counts every
forward that carried any of its rows, until the last candidate ends. The done event lists their final texts in rank
order (`EngineEvent.alternatives`); the caller chooses: the language server prefers the first
candidate that adds no parse error (`llada_lsp.postprocess.first_fitting`).

Token ids only; text is the service's business.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterator

import torch
from torch import Tensor

from engine.api import PRESET_ALTERNATIVES, alternatives_for
from engine.batch import execute, new_slot_attrs
from engine.decode import Sequence, TokenEvent

log = logging.getLogger(__name__)

__all__ = ["PRESET_ALTERNATIVES", "alternatives_for", "fork_tokens", "group_stats", "only", "run_group"]


def fork_tokens(first_logits: Tensor, n: int) -> list[int]:
    """The 2nd..n-th most likely tokens of the first position (the primary takes the 1st);
    disallowed (-inf) tokens never count."""
    k = min(n, first_logits.numel())
    top = first_logits.topk(k)
    return [int(t) for v, t in zip(top.values.tolist()[1:], top.indices.tolist()[1:], strict=True)
            if math.isfinite(v)]


def only(token: int, vocab_size: int) -> Tensor:
    """bool [V] allowing `token` alone (a forced first token)."""
    a = torch.zeros(vocab_size, dtype=torch.bool)
    a[token] = True
    return a


def run_group(model: torch.nn.Module, primary: Sequence, n: int,
              fork: Callable[[int, int], Sequence | None], max_len: int,
              cancel: Callable[[], bool] | None = None,
              on_prefilled: Callable[[Sequence], None] | None = None,
              forks: list[Sequence] | None = None) -> Iterator[TokenEvent]:
    """Decode `primary` (on its row) and its forks together; yields the primary's events, its
    done event last, once the forks have finished too. The forks start once the primary's
    first draft is complete (or it is done), so that they do not slow the first answer; their
    first tokens come from the primary's first step. `fork(token, row)` builds a fork whose
    first token is `token` on cache row `row` (rows primary.row + 1 ...); None skips it.
    The finished forks are appended to `forks` (the caller reads their final middles).

    The primary sets the pace: once it is done, the forks get as many more forwards as it took
    in all, and at least a block's worth (an empty primary ends at once); a fork still
    unfinished then is dropped."""
    group: list[tuple[Sequence, Tensor]] = [(primary, new_slot_attrs(max_len, primary.clean_len))]
    made: list[Sequence] = []
    primary.keep_first_logits = n > 1
    forked = n <= 1
    steps, last_step, drafted = 0, None, False
    while any(not s.done() for s, _ in group):
        if last_step is None and primary.done():
            last_step = steps + max(primary.b, primary.forwards)
        if last_step is not None and steps >= last_step:
            break
        if cancel is not None and cancel():
            yield primary.finish_event("cancelled")
            return
        live = [(s, a) for s, a in group if not s.done()]
        logits = execute(model, [s for s, _ in live], [s.prepare() for s, _ in live],  # type: ignore[arg-type]
                         [a for _, a in live])
        steps += 1
        for (s, _), lg in zip(live, logits, strict=True):
            first = s.forwards == 0
            ev = s.update(lg)
            if s is primary:
                drafted = drafted or ev.complete or s.done()
                if first and on_prefilled is not None:
                    on_prefilled(s)
                yield ev
        if not forked and drafted and primary.first_logits is not None:
            forked = True
            for i, tok in enumerate(fork_tokens(primary.first_logits, n)):
                try:
                    f = fork(tok, primary.row + 1 + i)
                except Exception:  # noqa: BLE001 - the request goes on without its alternatives
                    log.exception("an alternative failed to start")
                    break
                if f is not None:
                    f.tally = primary.tally  # the request's forwards count the forks' steps
                    made.append(f)
                    group.append((f, new_slot_attrs(max_len, f.clean_len)))
    if forks is not None:
        forks.extend(f for f in made if f.done())
    yield primary.finish_event()


def group_stats(primary: Sequence, forks: list[Sequence]) -> dict[str, int]:
    """What the candidates added, beside the request's forwards (`primary.tally`, which counts
    every forward that carried the primary or a fork once): the fork rows, the forwards they
    took part in all told (row-forwards, a fork's share of the batch), and the tokens of all
    the candidates."""
    return {"alternative_rows": len(forks), "alternative_row_forwards": sum(f.forwards for f in forks),
            "group_tokens": sum(len(s.final_middle()) for s in [primary, *forks])}
