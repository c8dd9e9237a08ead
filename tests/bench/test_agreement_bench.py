"""bench/agreement.py: a real typing session's engine requests (recorded through the real
server) decoded by Speedy as shipped and by its published rule. No timing asserted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.bench.watchdog import WATCHDOG_S

ROOT = Path(__file__).resolve().parents[2]


def test_agreement_commits_tokens_in_the_shipped_arm_only(tmp_path: Path) -> None:
    rec = tmp_path / "requests.jsonl"
    out = subprocess.run([sys.executable, "bench/agreement.py", "--record", str(rec), "--chars", "40"],
                         cwd=ROOT, capture_output=True, text=True, timeout=WATCHDOG_S, check=True).stdout
    res = json.loads(out.strip().splitlines()[-1])
    n = len(rec.read_text().splitlines())
    assert res["bench"] == "agreement" and res["requests"] == n > 0
    shipped, published = res["arms"]["shipped"], res["arms"]["published"]
    assert published["agreed_tokens"] == 0  # the published rule commits nothing by agreement
    # the held-out file repeats its names: the model and the context agree somewhere, and every
    # token agreement commits is a token in the drafts
    assert shipped["agreed_tokens"] > 0, res
    assert 0 <= res["same_first_draft"] <= n and 0 <= res["same_final"] <= n
    assert shipped["first_draft_forwards"] >= n and published["first_draft_forwards"] >= n  # a forward a draft at least
