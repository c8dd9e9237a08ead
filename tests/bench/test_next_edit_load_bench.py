"""bench/next_edit_load.py at its smallest scale: the real server over stdio, every case, and
its JSON line's keys (the figures themselves are the bench's, not asserted here)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.bench.watchdog import WATCHDOG_S

ROOT = Path(__file__).resolve().parents[2]


def test_smallest_scale_reports_every_case() -> None:
    out = subprocess.run([sys.executable, "bench/next_edit_load.py", "--scale", "0.001"], cwd=ROOT,
                         capture_output=True, text=True, timeout=WATCHDOG_S, check=True).stdout
    res = json.loads(out.strip().splitlines()[-1])
    assert res["bench"] == "next_edit_load" and res["idle_status_p99_ms"] > 0
    rows = {r["case"]: r for r in res["rows"]}
    assert set(rows) == {"params", "rename", "deep", "answer", "complete"}
    for r in rows.values():
        assert r["status_n"] >= 1 and r["answer_ms"] > 0 and r["status_max_ms"] >= r["status_p50_ms"]
    # at this scale every case is under the limits: each gets its follow-ups
    assert rows["params"]["suggestions"] == 100 and rows["rename"]["suggestions"] == 100
    assert rows["deep"]["suggestions"] == 1 and rows["answer"]["suggestions"] == 1
    assert rows["complete"]["answer"] == "completion"  # answered (its items are the model's)


def test_with_hogs_running() -> None:
    """`--hogs 1`: one case under a CPU hog (bench/busy.py's, ended by the bench) still answers."""
    out = subprocess.run([sys.executable, "bench/next_edit_load.py", "--scale", "0.001", "--cases", "deep",
                          "--hogs", "1"], cwd=ROOT, capture_output=True, text=True, timeout=600, check=True).stdout
    res = json.loads(out.strip().splitlines()[-1])
    assert res["hogs"] == 1 and [r["case"] for r in res["rows"]] == ["deep"] and res["rows"][0]["suggestions"] == 1
