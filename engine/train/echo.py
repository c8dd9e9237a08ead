"""Data echoing: train on a built batch again, under fresh diffusion noise, when new
examples are the bottleneck.

On the lent GPU the examples, not the GPU, set the pace (BENCHMARKS.md, "A lent GPU": 74% of
the run waited for batches). The clean rows of a block-diffusion batch are expensive to make
(cut, parse, tokenize on the host's cores); its noise (the mask ratio of each block, which
tokens are masked, which visible ones are replaced) is cheap, and a new draw is a new
training signal for the diffusion loss. `renoise` redraws the noise of a batch where it
lies (the device), with the same distribution as `data.make_batch`; `Echo` decides when a
batch is used again:
- `fixed` n: every fresh diffusion batch is followed by n - 1 echoed steps (deterministic);
- `auto` (up to n): echoed steps only while the next batch is not ready, so the device never
  waits and never repeats more than it must (not deterministic: it follows the host's speed).
An echoed step takes the recent fresh batches in turn and trains the diffusion loss only.
Autoregressive warm-up batches are never echoed. Teacher rows (distillation) are not
supported: their certainty targets depend on the noise.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import torch

from engine.model.native import NOISY
from engine.train.data import EDIT_NOISE, KEPT_WEIGHT, MIN_T, N_SPECIAL, Batch


def renoise(b: Batch, gen: torch.Generator, mask_id: int, vocab: int, block: int,
            edit_noise: float = EDIT_NOISE, kept_weight: float = KEPT_WEIGHT, min_t: float = MIN_T) -> Batch:
    """`b` with its noisy middle copies drawn anew: per block a mask ratio t ~ U[min_t, 1],
    tokens masked with probability t (weight 1/t), visible ones replaced at random with
    probability `edit_noise` (weight 1), the rest kept (weight `kept_weight`). The clean
    stream, positions, targets and attention mask stay as they are."""
    if b.certain is not None:
        raise ValueError("renoise: batches with teacher rows cannot be echoed")
    T, N = b.n_clean, b.noisy_target.shape[1]
    if N == 0:
        return b
    if N % block:
        raise ValueError(f"renoise: {N} noisy slots is not a whole number of {block}-token blocks")
    dev = b.idx.device
    B = b.idx.shape[0]
    live = b.kind[:, T:] == NOISY
    clean = torch.gather(b.idx[:, :T], 1, b.pos[:, T:].clamp(max=T - 1))  # slot j copies clean pos[j]
    t = torch.rand((B, N // block), generator=gen, device=dev) * (1 - min_t) + min_t
    t = t.repeat_interleave(block, dim=1)
    masked = torch.rand((B, N), generator=gen, device=dev) < t
    edited = ~masked & (torch.rand((B, N), generator=gen, device=dev) < edit_noise)
    rand_tok = torch.randint(N_SPECIAL, vocab, (B, N), generator=gen, device=dev)
    noisy = torch.where(masked, torch.full_like(clean, mask_id), torch.where(edited, rand_tok, clean))
    noisy = torch.where(live, noisy, b.idx[:, T:])
    w = torch.where(masked, 1.0 / t, torch.where(edited, torch.ones_like(t), torch.full_like(t, kept_weight)))
    # shifted logits: slot j's output predicts slot j+1's token, inside one block only
    w_next = torch.zeros_like(w)
    w_next[:, :-1] = w[:, 1:]
    weight = torch.where(b.noisy_target != -100, w_next, torch.zeros_like(w))
    weight = weight / live.sum().clamp_min(1) * B
    idx = b.idx.clone()
    idx[:, T:] = noisy
    return replace(b, idx=idx, noisy_weight=weight.to(b.noisy_weight.dtype))


POOL = 8  # recent fresh batches an echoed step draws from, in turn


@dataclass
class Echo:
    """When a step trains on a recent batch again instead of a new one. mode "off", "fixed"
    (each fresh batch followed by n - 1 echoed steps) or "auto" (echoed steps only while the
    next batch is not ready, at most n - 1 in a row). An echoed step takes the pool's batches
    in turn (the last POOL fresh ones), not the same batch again and again: a batch-8 run that
    repeated each batch 4 times in a row ended worse than one that stopped after its fresh
    data (BENCHMARKS.md, "A lent GPU")."""

    mode: str = "off"
    n: int = 1
    pool: deque[Batch] = field(default_factory=lambda: deque(maxlen=POOL))
    run: int = 0  # echoed steps since the last fresh batch
    turn: int = 0
    echoed: int = 0  # steps served by a renoised batch

    @classmethod
    def parse(cls, spec: str) -> Echo:
        """"1" or "off": no echo; "N": fixed N uses; "auto" or "auto:N": adaptive, N (4) at most."""
        if spec in ("off", "1"):
            return cls()
        if spec.startswith("auto"):
            n = int(spec.split(":", 1)[1]) if ":" in spec else 4
            if n < 1:
                raise ValueError("--echo auto:N needs N >= 1")
            return cls("auto", n)
        n = int(spec)
        if n < 1:
            raise ValueError("--echo needs N >= 1")
        return cls("fixed", n) if n > 1 else cls()

    def next(self, fetch: Callable[[], Batch], ready: Callable[[], bool],
             again: Callable[[Batch], Batch]) -> tuple[Batch, bool]:
        """The step's batch and whether it is fresh: `fetch` a new one, or `again` a pooled
        one when the rule allows it (`ready` says whether a new one waits)."""
        reuse = (self.mode != "off" and bool(self.pool) and self.run < self.n - 1
                 and (self.mode == "fixed" or not ready()))
        if reuse:
            self.run += 1
            self.echoed += 1
            self.turn = (self.turn + 1) % len(self.pool)
            return again(self.pool[-1 - self.turn]), False
        b = fetch()
        self.run, self.turn = 0, 0
        if b.noisy_target.shape[1] > 0:  # warm-up batches are never echoed
            self.pool.append(b)
        else:
            self.pool.clear()
        return b, True


def echo_batch(b: Batch, gen: torch.Generator, mask_id: int, vocab: int, block: int) -> Batch:
    """An echoed step's batch: fresh diffusion noise and no next-token loss (its clean
    stream's targets are the ones already trained on: repeating them only overfits)."""
    out = renoise(b, gen, mask_id, vocab, block)
    return replace(out, ar_weight=torch.zeros_like(out.ar_weight))


def batch_index(step: int, ar_steps: int, echo: Echo) -> int:
    """The example batch a fixed-echo run draws at `step` (resume re-seeds its workers there):
    one a step in the warm-up, one per n steps after it. A resume inside a group starts the
    next group early; `auto` cannot know and counts steps."""
    if echo.mode != "fixed" or step <= ar_steps:
        return step
    return ar_steps + -(-(step - ar_steps) // echo.n)

