"""Stable context windows: cut a growing prefix so that its start stays put while the user types.

The prompt is suffix-first (`<fim_suffix> suffix <fim_prefix> prefix <fim_middle>`), and
the prompt cache reuses the longest shared token prefix of two prompts. If the prefix were
cut to its last N tokens, every keystroke would move the cut and the cached prompt would
stop matching right after the suffix: a full prefill per keystroke in any file longer than
the budget. Both cuts here move in quanta instead (the character cut to a line start, the
token cut by a quarter of the budget), so typing changes only the prompt's tail until the
window jumps forward by a whole quantum: one full prefill per quantum of typing, as
llama.vscode's chunked context and SGLang's radix cache assume. Pure functions, no torch.
"""

from __future__ import annotations

CHAR_QUANTUM = 512  # the least the character cut moves at a time
CHAR_QUANTA_PER_WINDOW = 8  # ... and at a larger window, an eighth of it


def char_quantum(max_chars: int) -> int:
    """How far the character cut of a `max_chars` window moves at a time: 512 characters for
    the embedded model's ~2.7k-character window, an eighth of larger ones, so that a 4k-token
    prompt (~24k characters) is prefilled in full once per ~3k characters typed, not per 512."""
    return max(CHAR_QUANTUM, max_chars // CHAR_QUANTA_PER_WINDOW)


def char_window(text: str, max_chars: int, quantum: int | None = None) -> str:
    """The tail of `text` of at most `max_chars` characters, starting at a line start where
    one lies within the first quantum, at an offset that only changes when `len(text)`
    crosses a multiple of `quantum` (default `char_quantum(max_chars)`)."""
    if max_chars <= 0:
        return ""
    if len(text) <= max_chars:
        return text
    quantum = char_quantum(max_chars) if quantum is None else quantum
    quantum = max(1, min(quantum, max_chars // 2 or 1))
    start = -(-(len(text) - max_chars) // quantum) * quantum
    nl = text.find("\n", start, start + quantum)
    return text[nl + 1 if nl >= 0 else start:]


def token_window(ids: list[int], budget: int, quantum: int | None = None) -> list[int]:
    """The tail of `ids` that fits `budget`, dropping whole quanta (default: a quarter of the
    budget) from the front, so that the kept tokens start at the same token while `ids`
    grows by up to a quantum. Uses between budget - quantum + 1 and budget tokens."""
    if budget <= 0:
        return []
    if len(ids) <= budget:
        return ids
    q = max(1, quantum if quantum is not None else budget // 4)
    q = min(q, budget)
    drop = -(-(len(ids) - budget) // q) * q
    return ids[drop:]
