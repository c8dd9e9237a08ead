"""Context agreement: commit, in one step, the masked tokens on which the model and the
context agree.

Code repeats itself: a name, a call, a line's shape recur in the file being written. After a
step's commits, the tokens that follow the last committed one's most recent earlier
occurrence (in the committed middle, else in the prompt: prompt lookup) are the context's
guess of how the middle goes on. Where the model's own top token at the next masked
positions is that guess, position after position, those positions commit now as well, each
with its top token: the step commits what it would have committed, plus that run.

Only a run that starts right after the committed prefix of the middle counts (the guess
continues that prefix), it stops at the first position where the two disagree, and a guess
never runs through a special token (an end, a mask, a FIM marker). The model's own top token
is what commits: the context only decides which of them need not wait for another forward.
This is a lower commit threshold where two independent predictors agree; what it does to
the texts and to forwards is measured by bench/agreement.py (a typing session's requests) and
`bench/ab_sets.py agreement` (held-out tasks, paired).
"""

from __future__ import annotations

from collections.abc import Iterable

from torch import Tensor

# preset -> `context_agreement` on the native model (the embedded checkpoints), where it was
# measured (engine.decoding.indel.policy_for decides it once a request; BENCHMARKS.md)
NATIVE_AGREEMENT: dict[str, int] = {"speedy": 8}


class ContextLookup:
    """The continuation of a token sequence from its last token's most recent earlier
    occurrence: in the middle committed so far, else in the prompt (its trailing special
    tokens left out: the middle goes on from the text before them)."""

    def __init__(self, prompt: list[int], special: Iterable[int]) -> None:
        self.special = frozenset(special)
        end = len(prompt)
        while end and prompt[end - 1] in self.special:
            end -= 1
        self.tail = prompt[:end]
        self.last: dict[int, int] = {}  # token -> its last position in `tail`, the final one excluded
        for i, t in enumerate(self.tail[:-1]):
            self.last[t] = i

    def guess(self, middle: list[int], n: int) -> list[int]:
        """Up to `n` tokens that followed the last token of `tail + middle` the last time it
        occurred before (cut at the first special token)."""
        key = middle[-1] if middle else (self.tail[-1] if self.tail else None)
        if key is None or key in self.special:
            return []
        src: list[int] = middle
        j = next((i for i in range(len(middle) - 2, -1, -1) if middle[i] == key), None)
        if j is None:
            src, j = self.tail, self.last.get(key)
            if j is None:
                return []
        out: list[int] = []
        for t in src[j + 1:j + 1 + n]:
            if t in self.special:
                break
            out.append(t)
        return out


def agreeing_run(commit: Tensor, masked: Tensor, live: Tensor, top_id: Tensor, committed_ids: list[int | None],
                 lookup: ContextLookup, limit: int) -> Tensor:
    """`commit` with the run of agreeing positions added (bool [n] over the active block).

    committed_ids: the middle's tokens from its start to the block's end as they stand after
    this step's commits (None: still masked); the block is its last len(commit) positions."""
    n = commit.shape[0]
    start = len(committed_ids) - n
    frontier = next((i for i, t in enumerate(committed_ids) if t is None), len(committed_ids))
    if frontier < start or frontier >= len(committed_ids):
        return commit  # the committed prefix does not reach this block, or the block is full
    known = [t for t in committed_ids[:frontier] if t is not None]  # all of them: the committed prefix
    guess = lookup.guess(known, min(limit, len(committed_ids) - frontier))
    out = commit
    for k, g in enumerate(guess):
        p = frontier + k
        if committed_ids[p] is not None:  # committed by this step already: the run goes on through it if it agrees
            if committed_ids[p] != g:
                break
            continue
        b = p - start
        if not (bool(masked[b]) and bool(live[b]) and int(top_id[b]) == g):
            break
        if out is commit:
            out = commit.clone()
        out[b] = True
    return out
