"""bench/compare_models.py end to end: a checkpoint judged against itself ties on every task."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from engine.service import default_model_dir
from tests.bench.watchdog import WATCHDOG_S

ROOT = Path(__file__).resolve().parents[2]


def test_a_model_against_itself_differs_nowhere() -> None:
    ckpt = str(default_model_dir())
    out = subprocess.run([sys.executable, "bench/compare_models.py", ckpt, "--base", ckpt, "--per-kind", "3",
                          "--kinds", "single_line,multi_line", "--presets", "quality"],
                         cwd=ROOT, capture_output=True, text=True, timeout=WATCHDOG_S, check=True).stdout
    res = json.loads(out.strip().splitlines()[-1])
    assert res["bench"] == "compare_models" and res["tasks"] == 6
    rows = res["rows"]
    assert [(r["kind"], r["model"]) for r in rows] == [("single_line", "base"), ("single_line", "new"),
                                                        ("multi_line", "base"), ("multi_line", "new")]
    for base, new in zip(rows[::2], rows[1::2], strict=True):
        assert new["differ"] == 0 and new["em_wins"] == new["em_losses"] == 0 and new["es_sign_p"] == 1.0
        assert {k: base[k] for k in ("tpf", "exact_match", "edit_sim", "parse_ok")} == \
               {k: new[k] for k in ("tpf", "exact_match", "edit_sim", "parse_ok")}
        assert base["n"] == 3 and 0 < base["tpf"]
