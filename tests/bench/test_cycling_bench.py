"""bench/cycling.py end to end on the embedded model: its rows are consistent (what cycling
reaches includes what the first item reaches; an invoked answer has at least one item)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.bench.watchdog import WATCHDOG_S
from tests.llada_lsp.lsp_helpers import needs_model

ROOT = Path(__file__).resolve().parents[2]


@needs_model
def test_cycling_bench_rows() -> None:
    out = subprocess.run([sys.executable, "bench/cycling.py", "--per-kind", "3", "--kinds", "single_line",
                          "--mode", "speedy", "--invoked", "3"],
                         cwd=ROOT, capture_output=True, text=True, timeout=WATCHDOG_S, check=True).stdout
    res = json.loads(out.strip().splitlines()[-1])
    assert res["bench"] == "cycling" and res["invoked"] == 3 and res["tasks"] == 3
    row = res["kinds"]["single_line"]
    assert 1 <= row["n"] <= 3
    assert 1.0 <= row["items_mean"] <= 3.0 and 0.0 <= row["several"] <= 1.0
    assert row["em_first"] <= row["em_any"] and row["es_best"] >= 0.0
    assert 0.0 <= row["auto_empty"] <= 1.0 and 0.0 <= row["auto_rescued"] <= 1.0
    assert row["auto_p50_ms"] > 0 and row["invoked_p50_ms"] > 0
