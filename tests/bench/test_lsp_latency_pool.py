"""bench/lsp_latency.py --runs N pools its runs: the percentiles over every run's samples (not a
mean of medians), the counts and the server's reasons summed."""

from __future__ import annotations

from typing import Any

from bench.lsp_latency import pooled


def run_of(first: list[float], engine: list[float], answered: int, reasons: dict[str, int]) -> dict[str, Any]:
    return {"first_ms_p50": sorted(first)[len(first) // 2], "answered": answered, "requests": 10, "engine_answers":
            len(engine), "keystrokes": 10, "big_prefills": 0, "cache_hit_rate": 0.5, "prompt_reuse": 0.9,
            "server_counters": {"requests": 10}, "empty_reasons": reasons,
            "samples": {"first": first, "first_engine": engine, "final": first, "overhead": [1.0], "e2e": [2.0]}}


def test_runs_pool_their_samples_and_sum_their_counts() -> None:
    a = run_of([1.0, 2.0, 3.0], [3.0], 3, {"engine request superseded": 4})
    b = run_of([10.0, 20.0, 30.0, 40.0, 50.0], [40.0, 50.0], 5, {"engine request superseded": 1, "empty": 2})
    res = pooled([a, b])
    assert res["first_ms_p50"] == 20.0  # the 5th of the 8 sorted samples (pct), not a mean of 2.0 and 30.0
    assert res["engine_first_ms_p50"] == 40.0
    assert res["answered"] == 8 and res["requests"] == 20 and res["engine_answers"] == 3
    assert res["empty_reasons"] == {"engine request superseded": 5, "empty": 2}
    assert res["server_counters"] == {"requests": 20}
    assert res["runs_first_ms_p50"] == [2.0, 30.0]
    assert pooled([a]) is a
