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
candidate that adds no parse error (`llada_lsp.completion.postprocess.first_fitting`).

Token ids only; text is the service's business.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from engine.api import PRESET_ALTERNATIVES, alternatives_for
from engine.decoding.decode import Sequence

__all__ = ["PRESET_ALTERNATIVES", "alternatives_for", "fork_tokens", "forks_budget", "group_stats", "only"]


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


def forks_budget(primary: Sequence) -> int:
    """The pacing rule of alternatives: once the primary is done, its forks get as many more
    forwards as it took in all, and at least a block's worth (an empty primary ends at once);
    a fork still unfinished then is dropped. The forks start once the primary's first draft is
    complete, so that they do not slow the first answer (`engine.decoding.scheduler`)."""
    return max(primary.b, primary.forwards)


def group_stats(primary: Sequence, forks: list[Sequence]) -> dict[str, int]:
    """What the candidates added, beside the request's forwards (`primary.tally`, which counts
    every forward that carried the primary or a fork once): the fork rows, the forwards they
    took part in all told (row-forwards, a fork's share of the batch), and the tokens of all
    the candidates."""
    return {"alternative_rows": len(forks), "alternative_row_forwards": sum(f.forwards for f in forks),
            "group_tokens": sum(len(s.final_middle()) for s in [primary, *forks])}
