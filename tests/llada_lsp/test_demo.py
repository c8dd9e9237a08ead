"""The README's main command (`llada-lsp demo`) end to end on the embedded model: it shows
the first draft, the refinements to the final text, the stats, and the candidates of an
Invoked request at the same place."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.llada_lsp.lsp_helpers import needs_model

ROOT = Path(__file__).resolve().parents[2]


@needs_model
def test_demo_streams_a_completion_and_lists_its_candidates() -> None:
    out = subprocess.run([sys.executable, "-m", "llada_lsp", "demo", "--max-positions", "1"], cwd=ROOT,
                         capture_output=True, text=True, timeout=300, check=True).stdout
    assert "server ready" in out
    assert out.count("\n--- ") == 1, out
    if "no suggestion" in out:
        return  # a clear reason was printed instead; nothing more to check
    for part in ("first draft after", "final at", "tokens/forward", "cycling (an Invoked request"):
        assert part in out, out
    cycling = out[out.index("cycling (an Invoked request"):]
    n = int(cycling.split("): ", 1)[1].split(" ", 1)[0])
    assert all(f"[{k}]" in cycling for k in range(1, n + 1)) and f"[{n + 1}]" not in cycling


@needs_model
def test_demo_reports_a_bad_position_and_goes_on() -> None:
    out = subprocess.run([sys.executable, "-m", "llada_lsp", "demo", "--positions", "9999:1", "1:1"], cwd=ROOT,
                         capture_output=True, text=True, timeout=300, check=True).stdout
    assert "--- 9999:1  error:" in out and "past the end" in out
    assert "--- 1:1 " in out  # the next position was still asked
