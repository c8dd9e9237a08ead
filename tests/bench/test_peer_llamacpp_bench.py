"""bench/peer_llamacpp.py: the engine half runs at its smallest size (no llama.cpp build here),
and the full bench refuses clearly, exit 2, when llama-diffusion-cli is absent."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from engine.model.loader import cpu_has_bf16_matmul
from tests.bench.watchdog import WATCHDOG_S

ROOT = Path(__file__).resolve().parents[2]


def test_peer_bench_engine_half_runs_the_fixed_schedule_on_exact_prompts() -> None:
    out = subprocess.run([sys.executable, "bench/peer_llamacpp.py", "--smoke", "--prompts", "32,64",
                          "--threads", "1", "--steps", "4"],
                         cwd=ROOT, capture_output=True, text=True, timeout=WATCHDOG_S, check=True).stdout
    res = json.loads(out.strip().splitlines()[-1])
    assert res["bench"] == "peer_llamacpp" and res["smoke"] is True and res["llama_cpp"] is None
    assert res["shape"]["embedding_size"] == 126_464 and res["shape"]["d_model"] // res["shape"]["n_heads"] == 128
    assert [(r["prompt"], r["threads"]) for r in res["rows"]] == [(32, 1), (64, 1)]
    for r in res["rows"]:
        assert r["engine_forwards"] == 4  # one 32-token block, 4 forwards: the schedule, not a stop
        assert r["engine_tok_s"] > 0 and "llama_tok_s" not in r
        # as the product loads the bf16 checkpoint: float32 on a CPU without bf16 matrix units (it fits)
        assert r["engine_dtype"] == ("bfloat16" if cpu_has_bf16_matmul() else "float32")


def test_peer_bench_without_the_binary_says_how_to_build_it(tmp_path: Path) -> None:
    missing = tmp_path / "no-such" / "llama-diffusion-cli"
    r = subprocess.run([sys.executable, "bench/peer_llamacpp.py", "--llama-cli", str(missing), "--dir", str(tmp_path)],
                       cwd=ROOT, capture_output=True, text=True, timeout=WATCHDOG_S)
    assert r.returncode == 2
    assert str(missing) in r.stderr and "bash bench/peer_llamacpp_build.sh" in r.stderr
    assert list(tmp_path.iterdir()) == []  # refused before writing any checkpoint
