"""bench/lsp_latency.py --workspace-context --quick end to end: one run types into a package
file with its siblings open, workspace context off then on, and reports prompt reuse for
both. Context is really sent (built, with sibling files' chunks) and keystrokes keep reusing
the prompt cache (a context that changed every keystroke would leave only the suffix reused)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.bench.watchdog import WATCHDOG_S
from tests.llada_lsp.lsp_helpers import needs_model

ROOT = Path(__file__).resolve().parents[2]


@needs_model
def test_workspace_context_bench_quick() -> None:
    out = subprocess.run([sys.executable, "bench/lsp_latency.py", "--workspace-context", "--quick"], cwd=ROOT,
                         capture_output=True, text=True, timeout=WATCHDOG_S, check=True).stdout
    res = json.loads(out.strip().splitlines()[-1])
    assert {"prompt_reuse_off", "prompt_reuse_on", "big_prefills_on", "context_builds", "context_paths"} <= set(res)
    assert res["file"] == "completions.py" and res["keystrokes"] == 60
    assert res["engine_answers_on"] > 0 and res["engine_answers_off"] > 0
    assert res["context_builds"] >= 1 and res["context_tokens"] > 0
    siblings = {p.name for p in (ROOT / "llada_lsp" / "completion").glob("*.py")}  # completions.py's folder
    assert res["context_paths"] and set(res["context_paths"]) <= siblings, res["context_paths"]
    assert 0.8 <= res["prompt_reuse_on"] <= 1.0 and 0.0 <= res["prompt_reuse_off"] <= 1.0, res
    assert "\noff " in out and "\non " in out  # the table's two rows
