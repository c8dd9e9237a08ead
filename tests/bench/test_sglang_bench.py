"""`bench/lsp_latency.py --engine sglang fake --quick` runs (against the FAKE SGLang server) and
ends with its JSON line. The goals (overhead p50 <= 2 ms, abort p50 <= 5 ms) are measured
figures for BENCHMARKS.md, not asserted on a shared test machine; loose bounds catch a broken
measurement (e.g. an abort that waits for the server's 2 s disconnect timer)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.bench.watchdog import WATCHDOG_S

ROOT = Path(__file__).resolve().parents[2]


def test_quick_bench_prints_its_json_line() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "bench/lsp_latency.py", "--engine", "sglang", "fake", "--quick"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=WATCHDOG_S, check=True).stdout
    res = json.loads(out.strip().splitlines()[-1])
    assert res["bench"] == "lsp_latency_sglang" and res["server"] == "fake" and res["block_delay_ms"] == 20.0
    assert res["requests"] == 30 and res["aborts"] == 15
    assert 0 < res["overhead_ms_p50"] <= res["overhead_ms_p95"] < 200
    assert 0 < res["abort_ms_p50"] <= res["abort_ms_p95"] < 500
    assert res["wall_ms_p50"] >= 2 * res["block_delay_ms"]  # prefill rounds and at least one commit round
    assert 0 < res["early_release_ms_p50"] <= res["early_release_ms_p95"] < 1500  # first chunk, then the abort
    assert isinstance(res["ok"], bool) and "adapter overhead" in out


def test_sse_bench_refuses_the_endless_line_and_reads_every_event() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "bench/sse_parse.py", "--mb", "12"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=WATCHDOG_S, check=True).stdout
    res = json.loads(out.strip().splitlines()[-1])
    line, events = res["rows"][0], res["rows"][1]
    assert line["arm"] == "one line" and "longer than" in line["refused"] and line["written_mb"] < 12
    assert events["arm"] == "events" and events["events"] == 12 * 1024 and events["refused"] is None
    assert res["ok"] is True
