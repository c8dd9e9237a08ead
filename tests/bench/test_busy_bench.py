"""bench/busy.py at its smallest size (--quick: in process, auto threads, 0 and 1 hog, 2
bursts): every cell typed, its hogs gone, the table's JSON complete. No timing asserted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.bench.watchdog import WATCHDOG_S
from tests.llada_lsp.lsp_helpers import needs_model

ROOT = Path(__file__).resolve().parents[2]


@needs_model
def test_busy_quick_types_every_cell_and_stops_its_hogs() -> None:
    out = subprocess.run([sys.executable, "bench/busy.py", "--quick"], cwd=ROOT, capture_output=True, text=True,
                         timeout=WATCHDOG_S, check=True).stdout
    res = json.loads(out.strip().splitlines()[-1])
    assert res["bench"] == "busy" and res["cpus"] >= 1
    rows = res["rows"]
    assert [(r["engine"], r["threads"], r["hogs"]) for r in rows] == [("inprocess", "auto", 0), ("inprocess", "auto", 1)]
    for r in rows:
        assert r["requests"] == 2 and 0 <= r["empty"] <= 2 and r["hogs_left"] == 0, r
        assert 1 <= r["engine_threads"] <= res["cpus"], r  # the product's own choice, reported
        assert r["deadline_empty"] >= 0 and r["load1"] >= 0
    assert "goal ms" in out
