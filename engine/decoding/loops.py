"""Degenerate-loop guard: forbid the token that would make a short unit repeat once too often.

A small model's greedy decode falls into loops (`sort_sort_sort_...`, `'b', 'b', 'b', ...`)
that run to the token budget and leave text that neither matches nor parses. Before a
forward's logits are read, `loop_bans` lists, for each position of the active block whose
left context is committed, the one token that would complete `repeats` back-to-back copies of
a unit of 1..`max_unit` tokens; the decoder gives it -inf, so the position takes the model's
next choice (often the closing token or the end of the middle). Works on token ids only.
"""

from __future__ import annotations

DEFAULT_REPEATS = 4
DEFAULT_MAX_UNIT = 8


def loop_token(tokens: list[int], known: list[bool], i: int, repeats: int, max_unit: int,
               run_start: int | None = None) -> list[int]:
    """The tokens that, placed at index `i`, would end `repeats` copies of a unit of u tokens
    (u = 1..max_unit) laid back to back; the window before `i` must be committed.
    `run_start`: where the committed run ending at i - 1 starts (found here when None)."""
    if run_start is None:
        run_start = i
        while run_start > 0 and known[run_start - 1]:
            run_start -= 1
    out: list[int] = []
    for u in range(1, max_unit + 1):
        lo = i - repeats * u + 1  # the window tokens[lo:i] plus the candidate at i
        if lo < run_start:
            break
        if i - 1 - u >= lo and tokens[i - 1] != tokens[i - 1 - u]:
            continue  # the window's last token breaks the period already
        if all(tokens[j] == tokens[j + u] for j in range(lo, i - u)):
            t = tokens[i - u]
            if t not in out:
                out.append(t)
    return out


def loop_bans(tokens: list[int], known: list[bool], start: int, stop: int,
              repeats: int = DEFAULT_REPEATS, max_unit: int = DEFAULT_MAX_UNIT) -> list[tuple[int, int]]:
    """(index, token) pairs to forbid for indices start..stop-1 of `tokens`."""
    if repeats < 2:
        raise ValueError("repeats must be at least 2")
    bans: list[tuple[int, int]] = []
    run = start  # start of the committed run ending just before i
    while run > 0 and known[run - 1]:
        run -= 1
    for i in range(start, min(stop, len(tokens))):
        if i > start and not known[i - 1]:
            run = i
        if i - run >= repeats - 1:  # at least one unit of copies fits the run
            bans.extend((i, t) for t in loop_token(tokens, known, i, repeats, max_unit, run))
    return bans
