"""bench/next_edit.py end to end on 3 held-out tasks: its JSON line's keys and sanity; and its
scoring rule on hand-made suggestions."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from bench.next_edit import RenameTask, score, textual
from engine.api import EditSuggestion

ROOT = Path(__file__).resolve().parents[2]


def test_quick_run_reports_every_row() -> None:
    out = subprocess.run([sys.executable, "bench/next_edit.py", "--quick", "--threads", "1", "--thresholds",
                          "preset,0.2", "--max-passes", "2"],
                         cwd=ROOT, capture_output=True, text=True, timeout=600, check=True).stdout
    res = json.loads(out.strip().splitlines()[-1])
    assert res["bench"] == "next_edit" and res["tasks"] == 3 and res["sites"] >= 3
    names = [r["name"] for r in res["rows"]]
    assert names == ["textual rename", "model @ preset", "model @ 0.2"]
    base = res["rows"][0]
    assert base["recall"] == 1.0 and base["forwards_per_request"] == 0.0  # the old name at every site
    for r in res["rows"]:
        assert 0.0 <= r["precision"] <= 1.0 and 0.0 <= r["recall"] <= 1.0 and 0 <= r["correct"] <= r["suggestions"]
    for r in res["rows"][1:]:
        assert 1.0 <= r["forwards_per_request"] <= 2.0 and 0 < r["p50_ms"] <= r["p95_ms"]


def test_scoring_rule() -> None:
    region = "y = x + 1\nprint(x, 'x')\n"
    t = RenameTask("f", "x", "x_new", "", region, "", ((4, 5), (16, 17)))
    assert score(t, textual(t)) == (2, 3, 2)  # the string's 'x' is a wrong suggestion
    good = EditSuggestion(4, 5, "x_new", 0.9)
    wider = EditSuggestion(15, 17, "(x_new", 0.9)  # overlaps the site, changes nothing else
    extra = EditSuggestion(14, 17, "(x_new", 0.9)  # also drops a character
    wrong = EditSuggestion(4, 5, "z", 0.9)
    insert = EditSuggestion(5, 5, "_new", 0.9)  # an empty range touching the site
    assert score(t, (good, wider)) == (2, 2, 2)
    assert score(t, (extra, wrong)) == (0, 2, 0)
    assert score(t, (insert,)) == (1, 1, 1)
