"""The batch each training step takes (engine.train.train): cut on the device from the token
bank (`--bank`), built by the example workers (`--data-workers`), or made here from rows of
the example stream with the teacher's rows (`--distill`, `TeacherRows`) and the cross-file
rows (`--crossfile`, `crossfile_stream`) mixed in; then moved to the training device, its
attention mask built there. Also the fixed held-out batch (`held_batch`) that evaluation and
the speed probe read.
"""

from __future__ import annotations

import argparse
import dataclasses
import random
from pathlib import Path

import torch

from engine.model.native import ModelConfig, SpecialTokens
from engine.train.bank_sampler import BankSampler
from engine.train.corpus import read_text, split
from engine.train.crossfile_examples import CrossfileStream
from engine.train.data import Batch, Encoded, ExampleStream, attach_mask, make_batch
from engine.train.parallel import ParallelStream


def crossfile_stream(tokenizer: Path, block: int, seed: int) -> CrossfileStream:
    """Cross-file examples from the training split alone: the target and its context files are
    all training files (held-out files are never read), the prompt laid out as the engine lays it."""
    from engine.prompt.builder import PromptBuilder
    from engine.service import EMBEDDED_MAX_PROMPT

    train, _held = split()
    files = {f.key: t for f in train if (t := read_text(f)) is not None and t.strip()}
    stream = CrossfileStream(files, PromptBuilder.from_dir(tokenizer, EMBEDDED_MAX_PROMPT), block, seed + 77)
    print(f"cross-file examples: {len(stream.targets)} training files in {len(stream.pkgs)} packages")
    return stream


class TeacherRows:
    """The teacher rows in a seeded order, epoch after epoch; `pos` (rows handed out) resumes it."""

    def __init__(self, rows: list[Encoded], seed: int) -> None:
        if not rows:
            raise ValueError("no teacher rows")
        self.rows, self.seed, self.pos = rows, seed, 0
        self._order: tuple[int, list[int]] = (-1, [])

    def order(self, epoch: int) -> list[int]:
        if self._order[0] != epoch:
            order = list(range(len(self.rows)))
            random.Random(self.seed * 1000 + epoch).shuffle(order)
            self._order = (epoch, order)
        return self._order[1]

    def next(self, n: int) -> list[Encoded]:
        out = []
        for _ in range(n):
            epoch, i = divmod(self.pos, len(self.rows))
            r = self.rows[self.order(epoch)[i]]
            out.append(dataclasses.replace(r, teacher=True))
            self.pos += 1
        return out


def to_device(b: Batch, dev: torch.device) -> Batch:
    if dev.type == "cpu":
        return b
    moved = {f.name: getattr(b, f.name).to(dev, non_blocking=True) for f in dataclasses.fields(b)
             if isinstance(getattr(b, f.name), torch.Tensor)}
    return dataclasses.replace(b, **moved)


def next_batch(par: ParallelStream | None, stream: ExampleStream, teacher: TeacherRows | None,
               noise: torch.Generator, args: argparse.Namespace, cfg: ModelConfig, diffusion: bool,
               dev: torch.device, bank: BankSampler | None = None, cross: CrossfileStream | None = None) -> Batch:
    """The step's batch on `dev`, its mask built there: cut there from the token bank, from
    the workers' built batches, or from rows (the workers' or this process's) with the
    teacher's rows and the cross-file rows (`--crossfile`) mixed in."""
    if bank is not None:
        return attach_mask(bank.batch(args.batch, diffusion))
    got = par.next_batch() if par is not None else None
    if isinstance(got, Batch):
        return attach_mask(to_device(got, dev))
    n_teach = round(args.batch * args.distill_frac) if teacher is not None else 0
    n_cross = round(args.batch * args.crossfile) if cross is not None else 0
    n_own = args.batch - n_teach - n_cross
    rows = got[n_teach + n_cross:] if got is not None else [stream.next() for _ in range(n_own)]
    if teacher is not None:
        rows += teacher.next(n_teach)
    if cross is not None:
        rows += [cross.next() for _ in range(n_cross)]
    b = make_batch(rows, stream.sp, cfg.vocab_size, cfg.block_size, noise, diffusion,
                   teacher_suffix=args.distill_suffix, with_mask=False)
    return attach_mask(to_device(b, dev))


def held_batch(rows: list[Encoded], sp: SpecialTokens, cfg: ModelConfig, seed: int, dev: torch.device) -> Batch:
    """A fixed block-diffusion batch of `rows` on `dev`, its mask built there, the noise drawn
    from `seed` alone: the held-out evaluation and the speed probe read the same one each time."""
    return attach_mask(to_device(make_batch(rows, sp, cfg.vocab_size, cfg.block_size,
                                            torch.Generator().manual_seed(seed), True, with_mask=False), dev))
