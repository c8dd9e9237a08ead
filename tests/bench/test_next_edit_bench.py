"""bench/next_edit.py end to end on 3 held-out tasks per kind: its JSON line's keys and sanity;
and its scoring rule on hand-made answers."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from bench.next_edit_score import OFF, Tally, at_threshold, gate, row, score
from bench.next_edit_systems import Answer, textual
from bench.next_edit_tasks import Task, Truth
from llada_lsp.nextedit.edit_window import Suggested
from tests.bench.watchdog import WATCHDOG_S

ROOT = Path(__file__).resolve().parents[2]


def test_quick_run_reports_every_kind_and_gate() -> None:
    out = subprocess.run([sys.executable, "bench/next_edit.py", "--quick", "--threads", "1", "--models", "tiny-code",
                          "--analysis-lines", "400"],
                         cwd=ROOT, capture_output=True, text=True, timeout=WATCHDOG_S, check=True).stdout
    res = json.loads(out.strip().splitlines()[-1])
    assert res["bench"] == "next_edit" and res["tasks"]["rename"] == 3 and res["tasks"]["noise"] == 3
    systems = {r["system"] for r in res["rows"]}
    assert {"textual", "model tiny-code (every fill)"} <= systems
    for r in res["rows"]:
        if r["kind"] in ("rename", "param_added", "param_removed", "param_reordered"):
            assert 0.0 <= r["precision"] <= 1.0 and 0.0 <= r["recall"] <= 1.0
            lo, hi = r["recall_ci"]
            assert lo <= r["recall"] <= hi
        if r["kind"] == "noise" and r["system"] != "textual":
            assert r["fp_rate"] == 0.0  # the analysis names no follow-up kind for these edits
    assert set(res["gates"]) == {"default", "tiny-code"}
    assert res["analysis_speed"]["rename"]["kind"] == "rename"
    assert res["analysis_speed"]["field_added"]["kind"] == "field_added"
    # the default (fills off): an added parameter or field is located by a placeholder the server shows
    default = {r["kind"]: r for r in res["rows"] if r["system"].startswith("server default")}
    for kind in ("param_added", "field_added", "field_added [go]", "field_added [rust]"):
        assert default[kind]["placeholders"] == default[kind]["suggestions"] > 0, default[kind]
        assert default[kind]["recall"] > 0.5
    assert res["gates"]["default"]["placeholders_located"] <= res["gates"]["default"]["placeholders"]
    # a value added to a return: the unpackings get the placeholder; the textual baseline beside it
    assert res["tasks"]["return_added"] == 3 and default["return_added"]["placeholders"] > 0
    textual_rows = {r["kind"]: r for r in res["rows"] if r["system"] == "textual"}
    assert textual_rows["return_added"]["sites"] == default["return_added"]["sites"] > 0


def test_a_placeholder_counts_by_its_place_in_the_gate_and_gives_way_to_a_fill() -> None:
    old = "def f(a):\n    return a\n\n\nf(1)\n"
    new = old.replace("def f(a)", "def f(a, b)")
    at = new.index("1)") + 1
    t = Task("param_added", "f.py", old, new, 0, [Truth(at - 2, at + 1, "(1, 2)")])
    holder = Suggested(at, at, ", b", 0.0, "placeholder", (2, 3))
    fill = Suggested(at, at, ", 2", 0.4, "model")
    a = Answer([fill], 1.0, placeholders={(at, at): holder})
    assert at_threshold(a, 0.3) == [fill] and at_threshold(a, 0.5) == [holder] and at_threshold(a, OFF) == [holder]
    g = gate([t], [Answer([holder], 1.0, placeholders={(at, at): holder})])
    assert g["precision"] == 1.0 and g["recall"] == 1.0 and g["placeholders_exact"] == 0
    tl = Tally()
    score(t, Answer([holder], 1.0), tl)
    assert row("x", "param_added", tl)["content_em"] == 0.0  # the name is not the argument


def test_scoring_rule() -> None:
    old = "def f(x):\n    return x + g('x')\n"
    new = "def f(y):\n    return x + g('x')\n"
    at = new.index("x +")
    t = Task("rename", "f.py", old, new, 0, [Truth(at, at + 1, "y")])
    tl = Tally()
    score(t, textual(t), tl)  # the string's 'x' is a wrong suggestion
    assert (tl.suggestions, tl.located, tl.right, tl.sites_located) == (2, 1, 1, 1)
    tl = Tally()
    score(t, Answer([Suggested(at, at + 1, "z", 1.0), Suggested(0, 3, "fun", 1.0)], 1.0), tl)
    assert (tl.suggestions, tl.located, tl.right) == (2, 1, 0)  # located, but the wrong content
    r = row("x", "rename", tl)
    assert r["precision"] == 0.5 and r["recall"] == 1.0 and r["content_em"] == 0.0
    noise = Task("noise", "f.py", old, old.replace("'x'", "'x now'"), 1, [])
    tl = Tally()
    score(noise, Answer([Suggested(0, 1, "q", 1.0)], 1.0), tl)
    assert row("x", "noise", tl)["fp_rate"] == 1.0
