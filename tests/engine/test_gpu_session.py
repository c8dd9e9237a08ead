"""The prepared device run's plumbing (bench/gpu/session.sh), on the CPU.

No GPU is lent here: GPU_SESSION_DRY=1 trains the embedded model for a few seconds on the
CPU through the same command line and skips the GPU benchmarks. What must hold is what a
lent GPU's 15 minutes depend on: the script runs, writes at most 8 files under $OUT, and the
weights that come back in pieces rejoin into a checkpoint that loads.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import torch

from engine.checkpoint import EMBEDDED_DIR, load_checkpoint

ROOT = Path(__file__).resolve().parents[2]


def test_dry_session_returns_a_loadable_checkpoint(tmp_path: Path) -> None:
    out = tmp_path / "out"
    env = dict(os.environ, OUT=str(out), GPU_SESSION_DRY="1", TRAIN_S="6", PY=sys.executable,
               RUN_DIR=str(tmp_path / "run"))
    r = subprocess.run(["bash", str(ROOT / "bench/gpu/session.sh")], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "== train rc 0" in r.stdout and "decay from step" in (out / "train.txt").read_text()
    files = sorted(p.name for p in out.iterdir())
    assert len(files) <= 8, files  # what the device tool brings back
    parts = sorted(out.glob("model.safetensors.part-*"))
    assert len(parts) == 2 and all(p.stat().st_size <= 16 * 2**20 for p in parts)
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    for name in ("config.json", "tokenizer.json"):
        shutil.copy(EMBEDDED_DIR / name, ckpt / name)
    with (ckpt / "model.safetensors").open("wb") as f:
        for p in parts:
            f.write(p.read_bytes())
    trained, base = load_checkpoint(ckpt), load_checkpoint(EMBEDDED_DIR)
    a, b = trained.state_dict(), base.state_dict()
    assert a.keys() == b.keys()
    assert any(not torch.equal(a[k], b[k]) for k in a)  # it trained
    log = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    assert log and "held_ar" in log[-1]
