"""bench/sched_trace.py: its in-process driver serves the whole pool and accounts for every forward."""

from __future__ import annotations

from bench.sched_trace import PREFILL, drive
from engine.api import Plan
from engine.service import TextEngine

BODY = "def mean(xs):\n    total = 0\n    for x in xs:\n        total += x\n    return total / len(xs)\n"


def work() -> list[list[tuple[str, str, Plan]]]:
    """Three typing sessions of two completions each: the second extends the first's prefix."""
    out = []
    for k in range(3):
        pre = f"# module {k}\nimport math\n\n" + BODY * (k + 1)
        out.append([(pre + "def f(y):\n    ", "\n", Plan(max_tokens=12)),
                    (pre + "def f(y):\n    re", "\n", Plan(max_tokens=12))])
    return out


def test_trace_accounts_for_every_forward_and_batches_rows() -> None:
    engine = TextEngine()
    engine.prompt_cache.max_entries = 8
    seq, bat = drive(engine, work(), 1, "one"), drive(engine, work(), 3, "three")
    for r in (seq, bat):
        assert r["completions"] == 6
        assert sum(d["n"] for d in r["by_kind"].values()) == r["forwards"] >= r["steps"] > 0
        assert abs(sum(d["ms"] for d in r["by_kind"].values()) - r["forward_ms"]) < 1e-6
        assert all(d["fed"] <= d["padded"] for d in r["by_kind"].values())
        assert r["forward_ms"] + r["update_ms"] <= r["wall_ms"]
    # one at a time: every forward has one row; each session prefills its prompt once, then
    # the prompt cache restores it for the session's second request
    assert all(d["rows"] == d["n"] for d in seq["by_kind"].values())
    assert seq["by_kind"][PREFILL]["n"] == 3
    # three clients share forwards: more rows per forward, fewer steps for the same work
    assert max(d["rows"] / d["n"] for d in bat["by_kind"].values()) > 1
    assert bat["steps"] < seq["steps"]
