"""bench/busy.py at its smallest size (--quick: in process, auto threads, 0 and 1 hog, 2
bursts): every cell typed, its hog alive at its turns and gone after, the paired ratios there,
the table's JSON complete; and the hogs of a cell spin only at its turn. No timing asserted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from bench import busy
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
        assert r["hogs_alive_min"] == r["hogs"], r  # its hog spun at each of its turns
        assert r["paired_ratio_p50"] is not None and r["paired_ratio_p50"] > 0, r
        assert 1 <= r["engine_threads"] <= res["cpus"], r  # the product's own choice, reported
        assert r["deadline_empty"] >= 0 and r["load1"] >= 0
        # the reader itself and the cell's spinning hogs are runnable as its bursts end
        assert r["runnable"] >= 1 + r["hogs"], r
    assert "goal ms" in out and "runnable" in out


def state(pid: int) -> str:
    """The process's state letter in /proc (R running, S sleeping, T stopped, ...)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def test_a_cells_hogs_spin_only_at_its_turn() -> None:
    pool = busy.Hogs(2, 120.0)
    first, second = (h.pid for h in pool.procs)
    try:
        _, status = os.waitpid(second, os.WUNTRACED)  # held stopped from the start
        assert os.WIFSTOPPED(status)
        assert pool.spin(1) == 1
        assert state(first) != "T" and state(second) == "T"  # SIGCONT acts when it is sent
        pool.spin(0)
        _, status = os.waitpid(first, os.WUNTRACED)
        assert os.WIFSTOPPED(status) and state(first) == "T"
        assert pool.spin(2) == 2 and state(first) != "T" and state(second) != "T"
    finally:
        assert pool.close() == 0
    assert all(h.returncode is not None for h in pool.procs)
