"""bench/omp_threads.py end to end: three arms in fresh processes decode the same completions."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.bench.watchdog import WATCHDOG_S

ROOT = Path(__file__).resolve().parents[2]


def test_omp_threads_bench_runs_every_arm_and_they_agree() -> None:
    out = subprocess.run([sys.executable, "bench/omp_threads.py", "--requests", "2", "--rounds", "1"],
                         cwd=ROOT, capture_output=True, text=True, timeout=WATCHDOG_S, check=True).stdout
    res = json.loads(out.strip().splitlines()[-1])
    assert res["bench"] == "omp_threads" and set(res["median_ms"]) == {"main", "worker", "second_team"}
    assert all(v > 0 for v in res["median_ms"].values())
    assert res["slowdown_vs_main"]["main"] == 1.0 and res["slowdown_interval"]["main"] == [1.0, 1.0]
    assert all(lo <= hi for lo, hi in res["slowdown_interval"].values())
    assert res["same_texts"] is True  # the thread that decodes changes the time, never the text
