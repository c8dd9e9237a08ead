"""bench/names.py: its tasks (bench/name_tasks.py) put the cursor inside the identifier they name,
and it runs end to end on a couple of tasks a kind with both arms."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.bench.watchdog import WATCHDOG_S

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def test_tasks_put_the_cursor_inside_the_name() -> None:
    from bench.name_tasks import make_name_tasks

    tasks = make_name_tasks(3, seed=1)
    assert set(tasks) == {"same_file", "imported", "package", "definition"}
    for kind, ts in tasks.items():
        assert ts, kind
        for nt in ts:
            t = nt.task
            assert 0 < len(nt.typed) < len(nt.name) and nt.name.startswith(nt.typed)
            assert t.prefix.endswith(nt.typed) and t.middle.startswith(nt.name[len(nt.typed):])
            assert "\n" not in t.middle and t.kind == kind


def test_bench_runs_with_both_arms() -> None:
    # the smallest size: 2 tasks a kind, 1 latency task timed once, 3 keystrokes a scope mode
    r = subprocess.run([sys.executable, "bench/names.py", "--per-kind", "2", "--latency-tasks", "1",
                        "--latency-repeats", "1", "--scope-repeats", "3"], cwd=ROOT, capture_output=True,
                       text=True, timeout=WATCHDOG_S)
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["bench"] == "names" and out["scope"]["lines"] == 5000
    assert set(out["kinds"]) == {"same_file", "imported", "package", "definition", "ordinary"}
    for row in out["kinds"].values():
        assert row["n"] == 2
        for arm in ("ident_off", "ident_on", "line_off", "line_on"):
            lo, hi = row[arm]["ci"]
            assert lo <= row[arm]["em"] <= hi
    assert out["kinds"]["ordinary"]["sent"] == 0.0  # the cursor after indentation: no names
    assert out["latency"]["tasks"] == 1 and out["latency"]["repeats"] == 1 and out["latency"]["p50_on_ms"] > 0
