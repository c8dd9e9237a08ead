"""bench/draft_replay.py: a real typing session's engine requests are recorded through the real
server, then replayed through two engines; only the drafts every tree decoded alike are
compared. No timing asserted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from bench.draft_replay import compare
from tests.bench.watchdog import WATCHDOG_S

ROOT = Path(__file__).resolve().parents[2]


def test_a_recorded_session_replays_alike_through_the_same_code(tmp_path: Path) -> None:
    rec = tmp_path / "requests.jsonl"
    out = subprocess.run([sys.executable, "bench/draft_replay.py", "--record", str(rec), "--chars", "24",
                          "--tree", f"again={ROOT}", "--rounds", "1", "--threads", "1"],
                         cwd=ROOT, capture_output=True, text=True, timeout=WATCHDOG_S, check=True).stdout
    lines = rec.read_text().splitlines()
    assert lines, "the typing session sent the engine no request"
    first = json.loads(lines[0])
    assert first["doc_key"].endswith("shapes.py.txt") and first["plan"]["stop"] in ("none", "line", "dedent", "brace", "blank_line")
    res = json.loads(out.strip().splitlines()[-1])
    assert res["bench"] == "draft_replay" and res["requests"] == len(lines)
    # one thread, the same code: every request decodes to the same text in the same forwards
    assert res["identical"] == res["requests"], res
    this, again = res["trees"]["this"], res["trees"]["again"]
    assert this["ms_per_forward_p50"] > 0 and again["ratio"] > 0


def test_only_drafts_every_tree_decoded_alike_are_compared() -> None:
    a = [[(10.0, 2, "x)"), (30.0, 3, "y = 1"), (8.0, 2, "z")],
         [(12.0, 2, "x)"), (34.0, 3, "y = 1"), (9.0, 2, "z")]]
    b = [[(20.0, 2, "x)"), (60.0, 3, "y = 1"), (5.0, 1, "q")],  # the third decoded otherwise
         [(22.0, 2, "x)"), (62.0, 3, "y = 1"), (5.0, 1, "q")]]
    res = compare({"this": a, "old": b})
    assert res["requests"] == 3 and res["identical"] == 2 and res["by_forwards"] == {2: 1, 3: 1, 4: 0}
    this, old = res["trees"]["this"], res["trees"]["old"]
    assert this["draft_ms_p50_2_forwards"] == 11.0 and this["draft_ms_p50_3_forwards"] == 32.0  # medians over rounds
    assert old["draft_ms_p50_2_forwards"] == 21.0 and old["draft_ms_p50_3_forwards"] == 61.0
    assert this["ms_per_forward_p50"] == round((11.0 / 2 + 32.0 / 3) / 2, 2)
    assert old["ratio"] == round(old["ms_per_forward_p50"] / this["ms_per_forward_p50"], 3) and old["ratio"] > 1.8
