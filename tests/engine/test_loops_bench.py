"""bench/loops.py end to end: the guard off against itself ties; each setting gets its row."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_loops_bench_pairs_each_setting_with_the_baseline() -> None:
    out = subprocess.run([sys.executable, "bench/loops.py", "--per-kind", "3", "--kinds", "single_line",
                          "--presets", "quality", "--repeats", "0,0,4"],
                         cwd=ROOT, capture_output=True, text=True, timeout=600, check=True).stdout
    res = json.loads(out.strip().splitlines()[-1])
    assert res["bench"] == "loops" and res["tasks"] == 3
    base, same, guarded = res["rows"]
    assert [r["loop_repeats"] for r in res["rows"]] == [0, 0, 4]
    assert "differ" not in base and same["differ"] == 0 and same["es_sign_p"] == 1.0
    assert {k: base[k] for k in ("tpf", "exact_match", "edit_sim", "parse_ok")} == \
           {k: same[k] for k in ("tpf", "exact_match", "edit_sim", "parse_ok")}
    assert guarded["n"] == 3 and 0 <= guarded["differ"] <= 3 and 0 < guarded["tpf"]
