"""bench/step_work.py at its smallest size (--quick): every arm runs and checks its own
results (the confidences agree; the rotary, layout and one-row logits are bit-identical; the
drafts are the same texts with the mask skipped); no timing asserted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.bench.watchdog import WATCHDOG_S

ROOT = Path(__file__).resolve().parents[2]


def test_step_work_quick_runs_every_arm_and_they_agree() -> None:
    out = subprocess.run([sys.executable, "bench/step_work.py", "--quick"], cwd=ROOT, capture_output=True,
                         text=True, timeout=WATCHDOG_S, check=True).stdout
    res = json.loads(out.strip().splitlines()[-1])
    assert res["bench"] == "step_work" and res["reps"] == 3
    assert [c["dtype"] for c in res["confidence"]] == ["bf16", "fp32", "fp32, wide"]
    assert all(c["same"] for c in res["confidence"]), res["confidence"]
    assert res["rotary"]["bit_identical"] is True
    assert [(r["tokens"], r["bit_identical"]) for r in res["gemm_layout"]] == [(16, True), (250, True)], res["gemm_layout"]
    assert res["one_row"]["bit_identical"] is True, res["one_row"]
    assert res["no_mask"]["same_texts"] is True and res["no_mask"]["after_ms_a_step"] > 0, res["no_mask"]
    assert [sh["weights"] for sh in res["share"]] == ["bfloat16", "float32"]
    assert all(0 < sh["share_after"] < 1 and 0 < sh["share_before"] < 1 for sh in res["share"]), res["share"]
    assert res["rss"]["without_triton_mib"] > 0 and res["rss"]["with_triton_mib"] > 0
    cold = res["cold_start"]  # the old init path imports torch._dynamo; loading now does not
    assert cold["before_dynamo"] is True and cold["after_dynamo"] is False, cold
