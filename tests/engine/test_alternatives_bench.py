"""bench/alternatives.py end to end: one candidate against itself ties; each count gets its row."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_alternatives_bench_pairs_each_count_with_the_baseline() -> None:
    out = subprocess.run([sys.executable, "bench/alternatives.py", "--per-kind", "3", "--kinds", "single_line",
                          "--presets", "quality", "--counts", "1,1,3"],
                         cwd=ROOT, capture_output=True, text=True, timeout=600, check=True).stdout
    res = json.loads(out.strip().splitlines()[-1])
    assert res["bench"] == "alternatives" and res["tasks"] == 3
    base, same, three = res["rows"]
    assert [r["alternatives"] for r in res["rows"]] == [1, 1, 3]
    assert "differ" not in base and same["differ"] == 0 and same["es_sign_p"] == 1.0
    assert {k: base[k] for k in ("exact_match", "edit_sim", "parse_ok", "empty")} == \
           {k: same[k] for k in ("exact_match", "edit_sim", "parse_ok", "empty")}
    assert three["n"] == 3 and 0 <= three["differ"] <= 3 and three["p50_ms"] > 0 and three["p50_vs_base"] > 0
    assert 0 < three["tpf"] <= base["tpf"] + 1e-9  # the group's forwards are at least the primary's
