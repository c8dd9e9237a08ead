"""The prepared device run's plumbing (bench/gpu/session.sh), on the CPU.

No GPU is lent here: GPU_SESSION_DRY=1 trains the larger variant (preset mini-code) for a few
seconds on the CPU through the same command line and skips the GPU benchmarks. What must hold is what a
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

from engine.model.checkpoint import EMBEDDED_DIR, load_checkpoint
from engine.model.native import Transformer, preset
from tests.bench.watchdog import WATCHDOG_S

ROOT = Path(__file__).resolve().parents[2]


def test_dry_session_returns_a_loadable_checkpoint(tmp_path: Path) -> None:
    out = tmp_path / "out"
    env = dict(os.environ, OUT=str(out), GPU_SESSION_DRY="1", TRAIN_S="2", PY=sys.executable,
               RUN_DIR=str(tmp_path / "run"), BANK="")  # the host's workers cut the examples
    r = subprocess.run(["bash", str(ROOT / "bench/gpu/session.sh")], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=WATCHDOG_S)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    train_txt = (out / "train.txt").read_text()
    assert r.stdout.count("== train rc 0") == 2 and "decay from step" in train_txt
    probe = json.loads(next(line for line in train_txt.splitlines() if line.startswith('{"probe"')))
    assert probe["rows_per_s_one_process"] > 0 and probe["batches_per_s"] > 0  # the host's example rate
    files = sorted(p.name for p in out.iterdir())
    assert len(files) <= 8, files  # what the device tool brings back
    parts = sorted(out.glob("model.safetensors.part-*"))
    assert parts and all(p.stat().st_size <= 16 * 2**20 for p in parts)
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    shutil.copy(out / "config.json", ckpt / "config.json")
    shutil.copy(EMBEDDED_DIR / "tokenizer.json", ckpt / "tokenizer.json")
    with (ckpt / "model.safetensors").open("wb") as f:
        for p in parts:
            f.write(p.read_bytes())
    trained = load_checkpoint(ckpt)
    want = preset("mini-code")
    assert (trained.config.n_layer, trained.config.dim) == (want.n_layer, want.dim)
    state = trained.state_dict()
    assert all(t.dtype == torch.float32 and bool(torch.isfinite(t).all()) for t in state.values())
    fresh = Transformer(trained.config)
    fresh.init_weights(0)  # the run's seed: training moved the weights away from it
    assert any(not torch.equal(state[k], v.to(torch.bfloat16).float()) for k, v in fresh.state_dict().items())
    log = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    assert log and "held_ar" in log[-1] and log[0]["diff"] == 0.0


def test_dry_session_trains_on_a_token_bank(tmp_path: Path) -> None:
    """With a bank (prepare.sh's default) no example workers run: the batches are cut where the
    model trains, from the bank's tokens, and the held-out rows come with the bank."""
    import sysconfig

    from engine.prompt.tokenizer import load_tokenizer
    from engine.train.bank import TokenBank, held_rows

    tok = load_tokenizer(EMBEDDED_DIR)
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    texts = [(stdlib / f).read_text() for f in ("textwrap.py", "sched.py", "queue.py")]
    bank = TokenBank.build(texts, [1.0, 1.0, 1.0], tok)
    bank.held = held_rows(tok, [(stdlib / "copy.py").read_text()], 16, n=4)
    bank.save(tmp_path / "bank.npz.xz")
    out = tmp_path / "out"
    env = dict(os.environ, OUT=str(out), GPU_SESSION_DRY="1", TRAIN_S="2", PY=sys.executable,
               RUN_DIR=str(tmp_path / "run"), BANK=str(tmp_path / "bank.npz.xz"))
    r = subprocess.run(["bash", str(ROOT / "bench/gpu/session.sh")], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=WATCHDOG_S)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    train_txt = (out / "train.txt").read_text()
    assert r.stdout.count("== train rc 0") == 1 and '{"probe"' not in train_txt  # no workers, no probe
    assert "token bank" in train_txt and "3 files" in train_txt
    log = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    assert log and "held_ar" in log[-1] and all(rec["data_s"] < rec["elapsed_s"] for rec in log)
    assert sorted(out.glob("model.safetensors.part-*")) and (out / "config.json").exists()
