"""bench/guard.py at its smallest: the scripted engine's bad candidate list breaks the file
with the guard off and never with it on, and the check's cost is measured on a joined file;
the model's rows are consistent."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.bench.watchdog import WATCHDOG_S
from tests.llada_lsp.lsp_helpers import needs_model

ROOT = Path(__file__).resolve().parents[2]


def run(*args: str) -> dict:
    out = subprocess.run([sys.executable, "bench/guard.py", *args], cwd=ROOT, capture_output=True,
                         text=True, timeout=WATCHDOG_S, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def test_guard_bench_scripted() -> None:
    res = run("--engines", "scripted", "--per-kind", "3", "--cost-lines", "3000", "--cost-sites", "1")
    assert res["bench"] == "guard" and res["sites"] == 12
    cost = res["cost"]  # the check's cost on a joined file: every check timed, none passed wrongly
    assert cost["lines"] >= 3000 and cost["sites"] == 4 and cost["checks"] >= 4 * 5 and cost["wrong"] == 0
    assert 0 < cost["check_p50_ms"] <= cost["check_max_ms"] and cost["parse_ms"] > 0
    off, on = res["engines"]["scripted"]["off"]["all"], res["engines"]["scripted"]["on"]["all"]
    assert off["sites"] == on["sites"] == 12 and off["shown"] == 12 and off["broken"] > 0
    assert on["broken"] == 0 and on["shown"] + round(on["empty_share"] * 12) == 12


@needs_model
def test_guard_bench_model() -> None:
    res = run("--engines", "model", "--per-kind", "1", "--cost-lines", "0")
    for arm in ("off", "on"):
        rows = res["engines"]["model"][arm]
        assert set(rows) == {"line_end", "header", "mid_line", "new_line", "all"}
        assert rows["all"]["sites"] == 4 and 0 <= rows["all"]["broken"] <= rows["all"]["shown"] <= 4
