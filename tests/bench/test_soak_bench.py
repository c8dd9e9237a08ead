"""bench/soak.py --quick end to end: typing storms into the real server over an `auto` daemon
that is killed and frozen mid-run. Every request is answered (none lost, none a JSON-RPC error,
none stale) and the server comes back after each fault; the times are the bench's to report."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.bench.watchdog import WATCHDOG_S
from tests.llada_lsp.lsp_helpers import needs_model

ROOT = Path(__file__).resolve().parents[2]
KEYS = {"max_inflight_per_doc", "mem_growth", "p95_first_ms_start", "p95_first_ms_end", "errors", "lost",
        "stale", "recovery_s_killed", "recovery_s_frozen"}


@needs_model
def test_soak_quick_loses_nothing_and_recovers() -> None:
    out = subprocess.run([sys.executable, "bench/soak.py", "--quick"], cwd=ROOT, capture_output=True, text=True,
                         timeout=WATCHDOG_S, check=True).stdout
    res = json.loads(out.strip().splitlines()[-1])
    assert set(res) == KEYS
    assert res["lost"] == 0 and res["errors"] == 0 and res["stale"] == 0, res
    assert res["max_inflight_per_doc"] == 1, res  # a newer request ends the older one's stream
    assert res["recovery_s_killed"] > 0 and res["recovery_s_frozen"] > 0, res
    assert "recovery_s_killed" in out and "faults: kill freeze" in out
