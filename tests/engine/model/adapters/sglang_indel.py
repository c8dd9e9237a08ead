"""SGLang 0.5.23's own in/del decoder, run on the tiny LLaDA2.2 fixture for
tests/engine/model/adapters/test_indel.py.

The code that decides is the pinned wheel's (`tests/llada_lsp/engines/sglang_wheel.py` fetches
it from PyPI once): `sglang/srt/dllm/algorithm/joint_threshold_indel.py` (`JointThresholdInDel`:
`init_step_state`, `step`, `_apply_edit_operations`, `max_steps`), the loop that drives one
block, `sglang/srt/dllm/algorithm/base.py` (`DllmAlgorithm._run_sync`: a forward, then steps
and forwards until the step says done, at most `max_steps`), and `sglang/srt/dllm/config.py`
(`DllmConfig`). They are loaded from the wheel's files; only what they import and never run
in this loop is STUBBED (each pulls the CUDA/model stack):
- the package inits `sglang`, `sglang.srt`, `sglang.srt.dllm`, `sglang.srt.dllm.algorithm`
  (the last imports every algorithm; base.py takes `get_algorithm` from it: a placeholder);
- `sglang.srt.utils`: `is_npu` (False: a CUDA host, as the server's `_run_sync` branch);
- `sglang.srt.layers.logits_processor.LogitsProcessorOutput`,
  `sglang.srt.model_executor.forward_batch_info.ForwardBatch`,
  `sglang.srt.model_executor.model_runner.ModelRunner`, `sglang.srt.server_args.ServerArgs`,
  `sglang.srt.configs.model_config.ModelConfig`, `sglang.srt.arg_groups.overrides.resolving_view`:
  names used in annotations and in `DllmConfig.from_server_args` (not called here).
What the server's scheduler does around a block is written here, as the wheel's
`dllm/mixin/req.py` does it: blocks at absolute multiples of `block_size`, the prompt's last
partial block decoded as the first block (its prompt positions marked by `dllm_prompt_mask`),
each block's forward reading the committed tokens before it under the block-causal mask.
The forward is the fixture's uncached model (`forward`), not SGLang's runner.
"""

from __future__ import annotations

import importlib
import sys
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

STUBS: dict[str, dict[str, Any]] = {
    "sglang.srt.utils": {"is_npu": lambda: False},
    "sglang.srt.layers.logits_processor": {"LogitsProcessorOutput": object},
    "sglang.srt.model_executor.forward_batch_info": {"ForwardBatch": object},
    "sglang.srt.model_executor.model_runner": {"ModelRunner": object},
    "sglang.srt.server_args": {"ServerArgs": object},
    "sglang.srt.configs.model_config": {"ModelConfig": object},
    "sglang.srt.arg_groups.overrides": {"resolving_view": lambda args: args},
}
PACKAGES = ("sglang", "sglang.srt", "sglang.srt.dllm", "sglang.srt.dllm.algorithm")


@contextmanager
def _stubbed(root: Path) -> Iterator[None]:
    """The stubs above in sys.modules while the wheel's modules import; every `sglang` module
    is taken out again afterwards (the classes live on in what `load` returns)."""
    saved = {k: v for k, v in sys.modules.items() if k == "sglang" or k.startswith("sglang.")}
    try:
        for name in PACKAGES:
            pkg = types.ModuleType(name)
            pkg.__path__ = [str(root / name.replace(".", "/"))]
            sys.modules[name] = pkg
        sys.modules["sglang.srt.dllm.algorithm"].get_algorithm = None  # type: ignore[attr-defined]
        for name, attrs in STUBS.items():
            mod = types.ModuleType(name)
            mod.__dict__.update(attrs)
            sys.modules[name] = mod
        importlib.invalidate_caches()
        yield
    finally:
        for k in [k for k in sys.modules if k == "sglang" or k.startswith("sglang.")]:
            del sys.modules[k]
        sys.modules.update(saved)


@dataclass(frozen=True)
class Wheel:
    algorithm: type  # JointThresholdInDel
    config: type  # DllmConfig


def load(root: Path) -> Wheel:
    """The wheel's JointThresholdInDel and DllmConfig, imported from its unpacked sources."""
    with _stubbed(root):
        algo = importlib.import_module("sglang.srt.dllm.algorithm.joint_threshold_indel")
        cfg = importlib.import_module("sglang.srt.dllm.config")
    return Wheel(algo.JointThresholdInDel, cfg.DllmConfig)


def make(wheel: Wheel, block: int, mask: int, delete: int, split: int, **algorithm_config: Any) -> Any:
    """A JointThresholdInDel as the server builds it (`DllmConfig.from_server_args` then the
    algorithm's constructor); `algorithm_config`: the YAML's keys (threshold, ...)."""
    cfg = wheel.config(algorithm="JointThresholdInDel", algorithm_config=algorithm_config, block_size=block,
                       mask_id=mask, max_running_requests=1, first_done_first_out_mode=False,
                       delete_token_id=delete, split_token_id=split)
    return wheel.algorithm(cfg)


@dataclass
class Batch:
    """The fields of `ForwardBatch` the algorithm reads: one request's block."""

    input_ids: Tensor
    dllm_prompt_mask: Tensor
    batch_size: int = 1


@dataclass
class Output:
    full_logits: Tensor


@dataclass
class Forwarded:
    logits_output: Output
    can_run_graph: bool = False


@dataclass
class Run:
    canvas: list[int]  # prompt, then every generated position of the blocks decoded
    blocks: list[list[list[int]]] = field(default_factory=list)  # per block: its generated part after each step
    steps: int = 0  # steps that decided (not the ones that only saw a finished block)
    forwards: int = 0  # model forwards, the one that persists a cleaned block's KV included


Forward = Callable[[list[int], int, int], Tensor]  # (window, start, end) -> logits [end - start, V]


def generate(algo: Any, forward: Forward, prompt: list[int], gen_length: int) -> Run:
    """Decode `gen_length` positions after `prompt`, block by block, with the wheel's
    `_run_sync` and `step`; records each block after every deciding step."""
    b, mask = algo.block_size, algo.mask_id
    n_blocks = -(-(len(prompt) + gen_length) // b)
    run = Run(list(prompt) + [mask] * (n_blocks * b - len(prompt)))
    for k in range(len(prompt) // b, n_blocks):
        _block(algo, forward, run, k * b, max(0, len(prompt) - k * b))
    return run


def _block(algo: Any, forward: Forward, run: Run, start: int, lead: int) -> None:
    """One block at `start` (its first `lead` positions: the prompt's), as the server runs it."""
    b, step = algo.block_size, algo.step
    steps: list[list[int]] = []
    run.blocks.append(steps)
    batch = Batch(torch.tensor(run.canvas[start:start + b]), torch.arange(b)[None] < lead)

    class Runner:
        @staticmethod
        def forward(fb: Batch, pp_proxy_tensors: Any = None) -> Forwarded:
            run.forwards += 1
            window = run.canvas[:start] + fb.input_ids.tolist()
            return Forwarded(Output(forward(window, start, start + b)))

    def recorded(fb: Batch, logits: Tensor, states: list[Any]) -> list[bool]:
        finished = states[0]["finished"]
        done: list[bool] = step(fb, logits, states)
        if not finished:
            run.steps += 1
            steps.append(fb.input_ids[lead:].tolist())
        return done

    algo.step = recorded
    try:
        algo.run(Runner(), batch)  # synchronous mode: one block to its end (`_run_sync`)
    finally:
        algo.step = step
    run.canvas[start:start + b] = batch.input_ids.tolist()
