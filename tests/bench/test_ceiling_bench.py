"""bench/ceiling.py end to end on the embedded model: every arm gets its row, and no reranker
over the candidates beats the share of tasks where some candidate is exact."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.ceiling import ARMS, causal_logprobs  # noqa: E402
from tests.bench.watchdog import WATCHDOG_S  # noqa: E402


def test_ceiling_bench_bounds_the_rerankers() -> None:
    out = subprocess.run([sys.executable, "bench/ceiling.py", "--per-kind", "4", "--alternatives", "3"],
                         cwd=ROOT, capture_output=True, text=True, timeout=WATCHDOG_S, check=True).stdout
    res = json.loads(out.strip().splitlines()[-1])
    assert res["bench"] == "ceiling" and res["tasks"] == 4 and res["alternatives"] == 3
    rows = {r["arm"]: r for r in res["rows"]}
    assert set(rows) == set(ARMS) and all(r["n"] == 4 for r in rows.values())
    ceiling = rows["any candidate"]["exact_match"]
    for arm in ("shown", "likelihood sum", "likelihood mean"):
        assert rows[arm]["exact_match"] <= ceiling
    assert all(0.0 <= r["edit_sim"] <= 1.0 for r in rows.values())


def test_causal_logprobs_ignore_what_comes_later() -> None:
    """The scores are causal: a token's log-probabilities do not change with later tokens."""
    from engine.service import TextEngine

    eng = TextEngine(threads=1)
    ids = eng.tok.encode("def add(a, b):\n    return a + b\n").ids
    with torch.inference_mode():
        full = causal_logprobs(eng.model, ids)
        head = causal_logprobs(eng.model, ids[:6])
    assert full.shape == (len(ids) - 1, eng.config.vocab_size)
    torch.testing.assert_close(full[:5], head, rtol=1e-4, atol=1e-4)
    assert not torch.allclose(full[5], full[6])
