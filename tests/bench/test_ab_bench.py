"""bench/ab_sets.py end to end, through the A/B harness (bench/ab.py): an arm against an
identical arm ties; each setting gets its row, paired with the baseline."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.bench.watchdog import WATCHDOG_S

ROOT = Path(__file__).resolve().parents[2]
SAME = ("exact_match", "edit_sim", "parse_ok", "empty")


def ab_set(*args: str) -> dict[str, Any]:
    out = subprocess.run([sys.executable, "bench/ab_sets.py", *args, "--per-kind", "3", "--kinds", "single_line"],
                         cwd=ROOT, capture_output=True, text=True, timeout=WATCHDOG_S, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


@pytest.mark.parametrize(("name", "key", "values"), [("loops", "loop_repeats", ["0", "0", "4"]),
                                                     ("alternatives", "alternatives", ["1", "1", "3"])])
def test_each_setting_is_paired_with_the_baseline(name: str, key: str, values: list[str]) -> None:
    flag = {"loops": "--repeats", "alternatives": "--counts"}[name]
    res = ab_set(name, "--presets", "quality", flag, ",".join(values), "--rounds", "2")
    assert res["bench"] == name and res["tasks"] == 3 and res["rounds"] == 2
    base, same, other = res["rows"]
    assert [r[key] for r in res["rows"]] == [int(v) for v in values]
    assert all(r["preset"] == "quality" and r["kind"] == "single_line" and r["n"] == 3 for r in res["rows"])
    assert "differ" not in base and same["differ"] == 0 and same["es_sign_p"] == 1.0
    assert {k: base[k] for k in SAME} == {k: same[k] for k in SAME}
    assert base["tpf"] == same["tpf"]  # the same decode, forward for forward
    assert 0 <= other["differ"] <= 3 and 0 < other["tpf"] and other["p50_ms"] > 0
    assert 0 < other["p50_vs_base_lo"] <= other["p50_vs_base_hi"] and other["p50_vs_base"] > 0
    if name == "alternatives":
        assert other["tpf"] <= base["tpf"] + 1e-9  # the group's forwards are at least the primary's


def test_t2t_pairs_draft_edit_with_the_threshold_rule_per_tau() -> None:
    res = ab_set("t2t", "--taus", "0.5", "--edits", "0.8")
    assert res["bench"] == "t2t"
    assert [(r["tau"], r["arm"]) for r in res["rows"]] == [(0.5, "threshold"), (0.5, "draft_edit e=0.8")]
    assert "differ" not in res["rows"][0] and 0 <= res["rows"][1]["differ"] <= 3
