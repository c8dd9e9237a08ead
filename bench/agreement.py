"""Context agreement (engine.decoding.lookup) on a real typing session's engine requests.

The requests of one typing session (recorded as bench/draft_replay.py does: `bench/lsp_latency.py`
typing the held-out file into the real server) are decoded twice each in one process, by the
engine's Speedy as shipped (the native model: context agreement on) and by Speedy's published
rule (`context_agreement=0`), in alternating order. Reported per arm: the forwards to the first
complete draft (what the server shows first) and to the end of the request, the first draft's
time (p50, mean), the tokens agreement committed; and how many first drafts and final texts
the two arms decoded alike. The quality of the texts on held-out tasks is bench/decode.py's
(rows `speedy` and `speedy-agree`). A table and one JSON line.

    python bench/agreement.py [--requests FILE] [--record FILE] [--chars 200] [--limit N] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.draft_replay import record, requests  # noqa: E402

ARMS = ("shipped", "published")  # Speedy as the engine decodes it; Speedy without agreement


def decode(eng: Any, req: Any, policy: Any) -> dict[str, Any]:
    """One request to its end: first complete draft (ms, forwards, text), final text, stats."""
    t0 = time.perf_counter()
    first: tuple[float, int, str] | None = None
    done = None
    for ev in eng.complete(req, policy=policy):
        if first is None and (ev.draft_complete or ev.kind in ("done", "error")):
            first = ((time.perf_counter() - t0) * 1000, ev.step, ev.text)
        done = ev
    assert first is not None and done is not None
    st = done.stats or {}
    return {"ms": first[0], "forwards": first[1], "text": first[2], "final": done.text,
            "all_forwards": st.get("forwards", 0), "agreed": st.get("agreed_tokens", 0)}


def run(path: Path, limit: int, threads: int) -> dict[str, list[dict[str, Any]]]:
    import torch

    from engine.decoding.indel import policy_for
    from engine.decoding.policies import make_policy
    from engine.service import TextEngine

    torch.set_num_threads(threads)
    eng = TextEngine(threads=threads)
    policies = {"shipped": policy_for(eng.model, "speedy"), "published": make_policy("speedy", context_agreement=0)}
    reqs = requests(path, limit)
    for req in reqs[:4]:  # warm-up, unmeasured
        decode(eng, req, policies["published"])
    out: dict[str, list[dict[str, Any]]] = {a: [] for a in ARMS}
    for i, req in enumerate(reqs):
        for arm in ARMS if i % 2 == 0 else ARMS[::-1]:
            out[arm].append(decode(eng, req, policies[arm]))
    return out


def summary(res: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    a, b = res["shipped"], res["published"]
    rows = {arm: {"first_draft_forwards": sum(r["forwards"] for r in rs),
                  "all_forwards": sum(r["all_forwards"] for r in rs),
                  "agreed_tokens": sum(r["agreed"] for r in rs),
                  "first_ms_p50": round(statistics.median(r["ms"] for r in rs), 1),
                  "first_ms_mean": round(statistics.mean(r["ms"] for r in rs), 1)} for arm, rs in res.items()}
    return {"bench": "agreement", "requests": len(a), "arms": rows,
            "same_first_draft": sum(x["text"] == y["text"] for x, y in zip(a, b, strict=True)),
            "same_final": sum(x["final"] == y["final"] for x, y in zip(a, b, strict=True)),
            "first_draft_forwards_ratio": round(rows["published"]["first_draft_forwards"]
                                                / max(1, rows["shipped"]["first_draft_forwards"]), 3),
            "first_ms_mean_ratio": round(rows["published"]["first_ms_mean"] / max(1e-9, rows["shipped"]["first_ms_mean"]), 3)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--requests", type=Path, help="recorded requests (JSON lines); default: record now")
    p.add_argument("--record", type=Path, help="where to keep the session recorded now")
    p.add_argument("--chars", type=int, default=200, help="characters typed when recording")
    p.add_argument("--limit", type=int, default=10**9, help="the first N requests only")
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    path = args.requests or args.record or Path(tempfile.mkdtemp()) / "requests.jsonl"
    if args.requests is None:
        record(path, args.chars)
    s = summary(run(path, args.limit, args.threads))
    print(f"{'arm':>10} {'first-draft fwd':>15} {'all fwd':>8} {'agreed':>7} {'first p50 ms':>12} {'first mean ms':>13}")
    for arm, r in s["arms"].items():
        print(f"{arm:>10} {r['first_draft_forwards']:>15} {r['all_forwards']:>8} {r['agreed_tokens']:>7} "
              f"{r['first_ms_p50']:>12} {r['first_ms_mean']:>13}")
    print(f"{s['requests']} requests: {s['same_first_draft']} first drafts and {s['same_final']} final texts alike; "
          f"forwards to the first draft published/shipped {s['first_draft_forwards_ratio']}x")
    print(json.dumps(s))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
