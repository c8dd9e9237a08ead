"""A refused or broken checkpoint ends each command with one line that says why, never a Python
traceback: `llada-engine check`, `llada-engine complete` and `llada-lsp demo`, for a model type
without an adapter, a shard the index names but the directory lacks, and an unreadable
tokenizer.json."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fakes.real_ckpts import fixture

ROOT = Path(__file__).resolve().parents[3]
SAMPLE = "def f(x):\n    ret"


def _no_adapter(tmp: Path) -> tuple[Path, str]:
    d = tmp / "mamba"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"model_type": "mamba", "architectures": ["MambaForCausalLM"]}))
    (d / "tokenizer.json").write_bytes((fixture("dream-instruct") / "tokenizer.json").read_bytes())
    return d, "model_type 'mamba' has no native adapter"


def _dream_without(d: Path, name: str) -> Path:
    """The Dream fixture linked file by file into `d`, all but `name`."""
    d.mkdir()
    for f in fixture("dream-instruct").iterdir():
        if f.name != name:
            (d / f.name).symlink_to(f)
    return d


def _missing_shard(tmp: Path) -> tuple[Path, str]:
    d = _dream_without(tmp / "partial", "model-00002-of-00002.safetensors")
    return d, "names 1 weight file(s) that are missing, e.g. model-00002-of-00002.safetensors"


def _bad_tokenizer(tmp: Path) -> tuple[Path, str]:
    d = _dream_without(tmp / "badtok", "tokenizer.json")
    (d / "tokenizer.json").write_text('{"version": "1.0", "added_tokens": [{"id": 1, "content": "x"}]}')
    return d, "not a tokenizer this engine reads"


CASES = {"no_adapter": _no_adapter, "missing_shard": _missing_shard, "bad_tokenizer": _bad_tokenizer}


def _one_line(out: subprocess.CompletedProcess[str], why: str) -> str:
    assert out.returncode == 2, out.stderr[-2000:]
    lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert "Traceback" not in out.stderr and len(lines) == 1, out.stderr
    assert why in lines[0]
    return lines[0]


@pytest.mark.parametrize("case", sorted(CASES))
def test_check_and_complete_refuse_in_one_line(case: str, tmp_path: Path) -> None:
    model, why = CASES[case](tmp_path)
    src = tmp_path / "a.py"
    src.write_text(SAMPLE)
    check = subprocess.run([sys.executable, "-m", "engine.daemon.cli", "check", str(model)],
                           cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert _one_line(check, why).startswith("llada-engine check: ")
    complete = subprocess.run([sys.executable, "-m", "engine.daemon.cli", "complete", str(src), "--line", "2",
                               "--model", str(model)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert _one_line(complete, why).startswith("llada-engine complete: cannot load the model")


@pytest.mark.parametrize("case", ["no_adapter", "missing_shard"])
def test_demo_refuses_in_one_line(case: str, tmp_path: Path) -> None:
    model, why = CASES[case](tmp_path)
    src = tmp_path / "a.py"
    src.write_text(SAMPLE)
    demo = subprocess.run([sys.executable, "-m", "llada_lsp", "demo", str(src), "--positions", "2:8",
                           "--model", str(model), "--timeout", "60"], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    line = _one_line(demo, why)
    assert line.startswith("llada-lsp demo: the server's engine did not start: ")
