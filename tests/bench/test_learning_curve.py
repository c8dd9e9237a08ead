"""bench/learning_curve.py end to end on a chain of two runs built from the embedded checkpoint:
a run with snapshots and a device-style run that is its own final checkpoint."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from engine.service import default_model_dir
from tests.bench.watchdog import WATCHDOG_S

ROOT = Path(__file__).resolve().parents[2]
FILES = ("config.json", "model.safetensors", "tokenizer.json")


def _weights(into: Path) -> None:
    into.mkdir(parents=True, exist_ok=True)
    for name in FILES:
        (into / name).symlink_to(default_model_dir() / name)


def _log(path: Path, rows: list[tuple[int, int, float | None]]) -> None:
    path.write_text("".join(json.dumps({"step": s, "tokens": t, "ar": 2.0, "diff": 2.5}
                                       | ({"held_ar": h, "held_diff": h + 0.5} if h is not None else {})) + "\n"
                            for s, t, h in rows))


def _bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "bench/learning_curve.py", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=WATCHDOG_S)


def test_a_chain_of_runs_continues_steps_and_tokens(tmp_path: Path) -> None:
    first, device = tmp_path / "first", tmp_path / "device"
    _weights(first / "snap-000002")
    _weights(first / "snap-000004")
    _log(first / "log.jsonl", [(1, 100, None), (2, 200, 3.0), (3, 300, None), (4, 400, 2.9)])
    _weights(device)  # no snapshots: the run directory holds its final weights
    _log(device / "train_log.jsonl", [(5, 500, None), (10, 1000, 2.5)])
    out = _bench(str(first), str(device), "--per-kind", "3", "--seed", "0", "--plot", str(tmp_path / "lc.png"))
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout.strip().splitlines()[-1])
    curve = res["curve"]
    assert [(p["run"], p["step"], p["tokens"], p["held_ar"]) for p in curve] == \
           [("first", 2, 200, 3.0), ("first", 4, 400, 2.9), ("device", 14, 1400, 2.5)]
    assert res["tasks"] == 3 and all(p["tasks"] == 3 for p in curve)
    # the same weights at every point decode the same answers
    assert len({(p["exact_match"], p["edit_sim"]) for p in curve}) == 1
    for p in curve:
        lo, hi = p["em_ci"]
        assert 0 <= lo <= p["exact_match"] <= hi <= 1 and 0 <= p["edit_sim"] <= 1
    assert (tmp_path / "lc.png").stat().st_size > 0


def test_a_run_without_weights_or_log_is_a_clear_error(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    out = _bench(str(empty), "--per-kind", "1")
    assert out.returncode != 0 and "no log.jsonl or train_log.jsonl" in out.stderr
    _log(empty / "log.jsonl", [(1, 100, 3.0)])
    out = _bench(str(empty), "--per-kind", "1")
    assert out.returncode != 0 and "no snap-* directories and no model.safetensors" in out.stderr
