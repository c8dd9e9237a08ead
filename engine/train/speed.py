"""How the trainer runs its training step on its device, picked by timing it there.

Two choices change the speed of a step and nothing else:
- grouped-query attention under a mask (`engine.model.native.GQA_MODES`): "native" passes SDPA's
  `enable_gqa`; "expand" repeats the keys and values to every query head first. On CUDA the
  fused kernels refuse `enable_gqa` with a mask and SDPA falls back to its math kernel, which
  writes the whole score matrix in float32 (at batch 128 and ~670 positions, 1.4 GB a layer);
  on the CPU the flash kernel takes both, at the same speed.
- `torch.compile` of the model (fused norms, rotary and activations; kernels launched by
  fewer, larger calls: what a small model on a large GPU lacks most).

`pick` times forward, loss and backward of one real batch for each candidate, after a warm-up
call (for a compiled model: its compilation), and keeps the fastest. A candidate that fails
(a compiler missing on the device) is reported and left out. The step itself is unchanged,
so the choice moves only the step time, never the loss.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn

from engine.model.native import GQA_MODES, Transformer
from engine.train.data import Batch

LossFn = Callable[[nn.Module, Batch], torch.Tensor]


@dataclass
class Choice:
    gqa: str
    compiled: bool
    runner: nn.Module  # what the training step calls: the model, or its compiled wrapper
    ms: dict[str, float] = field(default_factory=dict)  # candidate -> median ms a step
    errors: dict[str, str] = field(default_factory=dict)  # candidate -> why it was left out

    def describe(self) -> str:
        times = ", ".join(f"{k} {v:.1f} ms" for k, v in self.ms.items())
        errs = "".join(f"; {k} failed: {v}" for k, v in self.errors.items())
        return f"step: gqa {self.gqa}, compiled {self.compiled} ({times}{errs})"


def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def step_ms(runner: nn.Module, batch: Batch, loss_fn: LossFn, dev: torch.device, bf16: bool,
            reps: int = 3, warmup: int = 1) -> float:
    """Median milliseconds of forward, loss and backward of `batch` (gradients dropped after)."""
    times: list[float] = []
    for i in range(warmup + reps):
        _sync(dev)
        t0 = time.perf_counter()
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=bf16):
            loss = loss_fn(runner, batch)
        loss.backward()
        _sync(dev)
        if i >= warmup:
            times.append((time.perf_counter() - t0) * 1000)
    for p in runner.parameters():
        p.grad = None
    return sorted(times)[len(times) // 2]


def candidates(gqa: str, compile_: str, dev: torch.device) -> tuple[list[str], list[bool]]:
    """The GQA modes and compile settings worth timing. "auto" times both GQA modes and the
    compiled model on CUDA only: on the CPU the modes run the same kernel, and compiling a
    model costs a minute of a run that lasts an hour."""
    modes = list(GQA_MODES) if gqa == "auto" and dev.type == "cuda" else ["native" if gqa == "auto" else gqa]
    comp = [False, True] if compile_ == "auto" and dev.type == "cuda" else [compile_ == "on"]
    return modes, comp


def pick(model: Transformer, batch: Batch, loss_fn: LossFn, dev: torch.device, bf16: bool,
         modes: list[str], comps: list[bool], reps: int = 3) -> Choice:
    """Time every GQA mode in `modes` eager, then (if `comps` has True) the fastest of them
    compiled, on `batch`; leave `model` set to the fastest candidate's mode. One candidate alone
    is taken untimed."""
    if len(modes) == 1 and comps == [False]:
        model.set_gqa(modes[0])
        return Choice(modes[0], False, model)
    best: tuple[float, str, bool, nn.Module] | None = None
    ms: dict[str, float] = {}
    errors: dict[str, str] = {}
    compiled: nn.Module | None = None
    for compiled_on in comps:
        # compiling costs a minute or more a mode: the compiled model runs the best eager mode only
        tried = [best[1]] if compiled_on and best is not None else modes
        for mode in tried:
            name = f"{mode}{'+compile' if compiled_on else ''}"
            model.set_gqa(mode)
            runner: nn.Module = model
            if compiled_on:
                if compiled is None:
                    compiled = torch.compile(model, dynamic=True)  # type: ignore[assignment]
                assert compiled is not None
                runner = compiled
            try:
                t = step_ms(runner, batch, loss_fn, dev, bf16, reps, warmup=2 if compiled_on else 1)
            except Exception as e:  # noqa: BLE001 - a candidate that cannot run is left out, reported
                errors[name] = f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
                for p in model.parameters():
                    p.grad = None
                continue
            ms[name] = t
            if best is None or t < best[0]:
                best = (t, mode, compiled_on, runner)
    if best is None:
        raise RuntimeError(f"no way to run a training step: {errors}")
    _, mode, compiled_on, runner = best
    model.set_gqa(mode)
    return Choice(mode, compiled_on, runner, ms, errors)


class StepProfile:
    """Profile the first `steps` training steps (`--profile-steps`) and print where their time
    went, by operator: a device run that comes back with this table says what to make faster
    next. A profiler that cannot start (no CUPTI in a sandbox) is reported and skipped."""

    def __init__(self, steps: int, dev: torch.device, rows: int = 15) -> None:
        self.left, self.dev, self.rows = steps, dev, rows
        self.prof: torch.profiler.profile | None = None
        if steps <= 0:
            return
        acts = [torch.profiler.ProfilerActivity.CPU]
        if dev.type == "cuda":
            acts.append(torch.profiler.ProfilerActivity.CUDA)
        try:
            self.prof = torch.profiler.profile(activities=acts)
            self.prof.start()
        except Exception as e:  # noqa: BLE001 - a diagnostic only: training goes on without it
            print(f"profile: could not start ({type(e).__name__}: {e})")
            self.prof = None

    def after_step(self) -> str | None:
        """Count a finished step; after the last profiled one, the table (else None)."""
        if self.prof is None:
            return None
        self.left -= 1
        return self.close() if self.left <= 0 else None

    def close(self) -> str | None:
        """Stop profiling (a run shorter than its profiled steps ends here); the table, or None
        when nothing was being profiled."""
        if self.prof is None:
            return None
        _sync(self.dev)
        prof, self.prof = self.prof, None
        prof.stop()
        key = "self_cuda_time_total" if self.dev.type == "cuda" else "self_cpu_time_total"
        return prof.key_averages().table(sort_by=key, row_limit=self.rows)
