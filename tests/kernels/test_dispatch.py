"""One dispatch for every kernel (kernels.dispatch): one variable, one value set, the same
choice for the confidence kernel and the routed experts; a call's `backend=` comes first."""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

import kernels  # noqa: E402
from kernels.dispatch import BACKENDS, ENV_VAR, choose  # noqa: E402


def test_one_variable_and_one_value_set() -> None:
    assert kernels.ENV_VAR == ENV_VAR == "LLADA_KERNELS"
    assert kernels.BACKENDS == BACKENDS == ("auto", "triton", "eager", "reference")


@pytest.mark.parametrize("value", ["eager", "reference", "auto"])
def test_both_kernels_follow_the_same_value(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv(ENV_VAR, value)
    cpu = torch.zeros(3, 8)
    want = "eager" if value == "auto" else value  # auto on the CPU: the eager path
    assert kernels.backend_name(cpu) == want
    assert kernels.moe_backend_name(cpu) == want


def test_a_calls_backend_comes_before_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_VAR, "eager")
    cpu = torch.zeros(3, 8)
    assert kernels.backend_name(cpu, "reference") == "reference"
    assert kernels.moe_backend_name(cpu, "reference") == "reference"
    assert choose(cpu, triton=False, backend="reference") == "reference"


@pytest.mark.parametrize("value", ["grouped", "fast", "cuda"])
def test_an_unknown_value_is_refused_by_name(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv(ENV_VAR, value)
    cpu = torch.zeros(3, 8)
    for pick in (kernels.backend_name, kernels.moe_backend_name):
        with pytest.raises(ValueError, match=f"LLADA_KERNELS='{value}': expected one of auto, triton"):
            pick(cpu)


def test_auto_falls_back_to_the_reference_where_the_eager_path_cannot_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_VAR, raising=False)
    cpu = torch.zeros(3, 8)
    assert choose(cpu, triton=True) == "eager"  # Triton only for CUDA tensors under auto
    assert choose(cpu, triton=True, eager=False) == "reference"
    monkeypatch.setenv(ENV_VAR, "triton")
    with pytest.raises(RuntimeError, match="Triton cannot be imported"):
        choose(cpu, triton=False)
    assert choose(cpu, triton=True) == "triton"


def test_a_cpu_only_process_does_not_import_triton() -> None:
    """Issue 50: where Triton cannot run (no CUDA device, no TRITON_INTERPRET) the package skips
    its import (~70 MiB of RSS before any model); the CPU path still runs, and MoE too."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    code = ("import json, sys, torch, kernels\n"
            "c = kernels.confidence(torch.randn(3, 50))\n"
            "print(json.dumps(['triton' in sys.modules, kernels.triton_available(), kernels.backend_name(torch.zeros(1, 2)),"
            " kernels.moe_backend_name(torch.zeros(1, 2)), int(c.top_id.numel()), 'triton' in sys.modules]))")
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "LLADA_KERNELS")}
    env["CUDA_VISIBLE_DEVICES"] = ""
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True, check=True)
    got = json.loads(out.stdout.splitlines()[-1])
    assert got[0] is False and got[1] is False and got[2] == "eager" and got[4] == 3 and got[5] is False, got
    assert got[3] in ("eager", "reference"), got
