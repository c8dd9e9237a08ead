"""bench/concurrency.py end to end on a real daemon: every arm in every round, pooled figures."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.bench.watchdog import WATCHDOG_S

ROOT = Path(__file__).resolve().parents[2]


def test_concurrency_bench_alternates_rounds_and_pools_them() -> None:
    out = subprocess.run([sys.executable, "bench/concurrency.py", "--clients", "1,2", "--sessions", "3",
                          "--requests", "2", "--rounds", "2", "--max-tokens", "8"],
                         cwd=ROOT, capture_output=True, text=True, timeout=WATCHDOG_S, check=True).stdout
    res = json.loads(out.strip().splitlines()[-1])
    assert res["rounds"] == 2 and len(res["per_round_batched_vs_sequential"]) == 2
    # every arm served the whole pool (3 sessions x 2 completions) in each of the 2 rounds
    assert res["clients"]["1"]["completions"] == res["clients"]["2"]["completions"] == 12
    assert res["sequential"]["completions"] == 12
    assert res["clients"]["1"]["avg_batch"] == 1.0 and res["sequential"]["avg_batch"] == 1.0
    assert 1.0 <= res["clients"]["2"]["avg_batch"] <= 2.0
    assert all(x > 0 for x in res["per_round_batched_vs_sequential"])
    # the ratio comes from unrounded throughputs, the JSON shows each rounded to 3 places
    shown = res["clients"]["2"]["throughput"] / res["sequential"]["throughput"]
    assert abs(res["batched_vs_sequential_at_8"] - shown) <= 0.002 * shown
