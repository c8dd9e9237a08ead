"""bench/index_memory.py --quick end to end: both shapes measured in a fresh process each, the
table and the final JSON line with the ratios (their values are the bench's to report)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.bench.watchdog import WATCHDOG_S

ROOT = Path(__file__).resolve().parents[2]


def test_index_memory_bench_quick() -> None:
    out = subprocess.run([sys.executable, "bench/index_memory.py", "--quick"], cwd=ROOT,
                         capture_output=True, text=True, timeout=WATCHDOG_S, check=True).stdout
    res = json.loads(out.strip().splitlines()[-1])
    assert res["bench"] == "index_memory" and {"rss_per_byte", "rss_per_cost", "rss_per_byte_tiny"} <= set(res)
    assert [r["shape"] for r in res["rows"]] == ["code", "tiny"]
    for r in res["rows"]:
        assert r["files"] > 0 and r["definitions"] > 0 and r["indexed_bytes"] >= 0.5 * (1 << 20), r
        assert 0.5 <= r["kept_per_byte"] <= 1.0, r  # the index keeps definitions' text, not more
    assert " code " in out and " tiny " in out  # the table's rows
