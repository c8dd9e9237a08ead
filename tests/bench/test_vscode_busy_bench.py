"""bench/vscode_busy.py at its smallest size (--quick: hogs 0 and 1, 2 trials) in real VS Code
(code-server + chromium, as tests/editors/test_vscode_real.py) with the real server and the
embedded model: every cell typed, ghost text on the screen in each, its hog alive at its turns
and gone after, the JSON complete. The wait is the watchdog's, not a speed: no timing asserted.
And the report's arithmetic on made-up trials."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bench.vscode_busy import Cell, judge, row
from tests.bench.watchdog import WATCHDOG_S
from tests.llada_lsp.lsp_helpers import needs_model

ROOT = Path(__file__).resolve().parents[2]


@needs_model
@pytest.mark.skipif(shutil.which("npm") is None or shutil.which("node") is None, reason="node/npm not installed")
@pytest.mark.skipif(sys.platform != "linux", reason="the set-up script installs Debian packages")
@pytest.mark.skipif(os.environ.get("LLADA_SKIP_REAL_EDITORS") == "1", reason="LLADA_SKIP_REAL_EDITORS=1")
@pytest.mark.skipif(not (Path(sys.executable).parent / "llada-lsp").exists(),
                    reason="no llada-lsp beside this Python (./dev demo makes the .venv)")
def test_vscode_busy_quick_shows_ghost_text_in_every_cell() -> None:
    out = subprocess.run([sys.executable, "bench/vscode_busy.py", "--quick", "--wait-s", "300"], cwd=ROOT,
                         capture_output=True, text=True, timeout=WATCHDOG_S, check=True).stdout
    res = json.loads(out.strip().splitlines()[-1])
    assert res["bench"] == "vscode_busy" and res["cpus"] >= 1 and res["trials"] == 2
    assert [r["hogs"] for r in res["rows"]] == [0, 1]
    for r in res["rows"]:
        assert r["trials"] == 2 and r["shown"] >= 1, r  # ghost text drawn by VS Code itself
        assert r["hogs_alive_min"] == r["hogs"] and r["hogs_left"] == 0, r
        assert r["deadline_empty"] >= 0 and r["p50_ms"] >= 0 and len(r["trial_ms"]) == 2, r  # counted, not judged
    assert "goal ms" in out


def test_the_report_pairs_trials_and_keeps_fresh_ones_apart() -> None:
    quiet = Cell(0, "q.py", ms=[100.0, 200.0, None, 50.0, 80.0], carried=[False, True, False, False, False],
                 load1=[0.5], runnable=[1, 2])
    busy = Cell(2, "b.py", ms=[300.0, None, 400.0, 100.0, 240.0], carried=[False, False, False, True, False],
                load1=[3.0, 4.0], runnable=[3, 4, 5], hogs_alive_min=2, status_when_missed=["llada slow: 0.4 s/step"])
    rows = [row(quiet, quiet, 0), row(busy, quiet, 0)]
    q, b = rows
    assert (q["shown"], q["fresh"], q["fresh_p50_ms"]) == (4, 3, 80.0)  # the carried 200 ms is not fresh
    # fresh in both: 300/100 and 240/80 (not 100/50: carried in the busy cell; None never pairs)
    assert (b["shown"], b["fresh"], b["paired"], b["paired_ratio_p50"]) == (4, 3, 2, 3.0)
    assert b["load1"] == 3.5 and b["runnable"] == 4 and b["status_when_missed"] == ["llada slow: 0.4 s/step"]
    judge(rows, cpus=2)
    assert b["goal_ms"] == (1 + 2 / 2) * q["p50_ms"] + 10 and b["vs_quiet"] == round(b["p50_ms"] / q["p50_ms"], 2)
    assert b["meets_goal"] == (b["p50_ms"] <= b["goal_ms"])
