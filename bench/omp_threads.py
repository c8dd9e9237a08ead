"""Which thread may issue the forwards: torch's OpenMP teams and a second decoding thread.

    python bench/omp_threads.py [--model DIR] [--threads 2] [--requests 12] [--rounds 2]

torch's CPU parallelism here is GNU OpenMP, which keeps one team of worker threads per thread
that starts parallel regions. Once two threads of a process have both run parallel ops, there
are two teams, more OpenMP threads than cores on a small machine, and every op that goes
parallel pays for it (libgomp stops spinning and sleeps on a futex when its threads outnumber
the cores; the other team's workers compete for the cores). The daemon and the language
server therefore run every torch op on one thread (`Daemon.serve_in_main_thread`,
`llada_lsp.engines.engine_client.InProcessEngine`'s worker).

Each arm runs in a fresh process (the teams cannot be undone), loads the embedded model and
decodes the same single-line completions one at a time (the prompt cache off):
  main          load and decode on the main thread (the daemon's layout);
  worker        load and decode on one worker thread; the main thread never runs torch
                (the language server's in-process engine);
  second_team   the main thread loads and decodes one warm-up request, then a worker thread
                decodes (the daemon before session 16: two OpenMP teams).
The arms alternate over `--rounds` (bench/ab.py's harness). Prints a table (median completion
time, completions/s, ratio to `main` with a paired bootstrap 95% interval over the requests)
and one JSON line (`same_texts`: every arm decoded the same completions, as it must).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

ARMS = ("main", "worker", "second_team")


def requests(n: int) -> list[Any]:
    """n single-line completions cut from this repository's engine sources (fixed cut points)."""
    from engine.api import CompletionRequest, Plan

    text = (ROOT / "engine" / "decoding" / "decode.py").read_text()
    lines = text.split("\n")
    out = []
    for i in range(n):
        at = 40 + (i * 37) % (len(lines) - 80)
        line = lines[at]
        indent = len(line) - len(line.lstrip())
        cut = sum(len(q) + 1 for q in lines[:at]) + indent
        out.append(CompletionRequest(f"r{i}", f"omp://{i}", text[max(0, cut - 1200):cut],
                                     text[cut:cut + 300], Plan(max_tokens=32, stop="line")))
    return out


def decode_all(engine: Any, reqs: list[Any], texts: list[str] | None = None) -> list[float]:
    """Milliseconds per completion; the final texts go to `texts`."""
    times = []
    for r in reqs:
        t0 = time.perf_counter()
        events = list(engine.complete(r))
        times.append((time.perf_counter() - t0) * 1000)
        if texts is not None and events:
            texts.append(events[-1].text)
    return times


def arm(name: str, model: str | None, threads: int, n: int) -> dict[str, Any]:
    """One arm, in this process: returns per-completion milliseconds."""
    import torch

    torch.set_num_threads(threads)
    from engine.service import TextEngine

    reqs = requests(n)
    box: dict[str, Any] = {}

    def load() -> Any:
        eng = TextEngine(model, prompt_cache_entries=0)
        decode_all(eng, reqs[:1])  # warm-up: first-call set-up of every op
        return eng

    texts: list[str] = []
    if name == "main":
        box["ms"] = decode_all(load(), reqs, texts)
    else:
        eng = load() if name == "second_team" else None  # the main thread starts a team

        def work() -> None:
            box["ms"] = decode_all(eng if eng is not None else load(), reqs, texts)

        t = threading.Thread(target=work, name=f"bench-{name}")
        t.start()
        t.join()
    return {"arm": name, "ms": box["ms"], "texts": texts}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", help="checkpoint directory (default: the embedded model)")
    ap.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    ap.add_argument("--requests", type=int, default=12, help="completions per arm")
    ap.add_argument("--rounds", type=int, default=2, help="rounds of the three arms, alternated")
    ap.add_argument("--arm", choices=ARMS, help=argparse.SUPPRESS)  # one arm, in a child process
    args = ap.parse_args()
    if args.arm:
        print(json.dumps(arm(args.arm, args.model, args.threads, args.requests)))
        return
    from bench.ab import alternated, ratio_interval  # the harness, in the parent only

    def child(i: int) -> dict[str, Any]:
        cmd = [sys.executable, __file__, "--arm", ARMS[i], "--threads", str(args.threads),
               "--requests", str(args.requests)] + (["--model", args.model] if args.model else [])
        out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=True).stdout
        return json.loads(out.strip().splitlines()[-1])

    runs = dict(zip(ARMS, alternated(len(ARMS), args.rounds, child), strict=True))
    ms = {a: [m for res in runs[a] for m in res["ms"]] for a in ARMS}
    # each request's median over the rounds, paired by request for the ratio's interval
    per_req = {a: [statistics.median(v) for v in zip(*(res["ms"] for res in runs[a]), strict=True)] for a in ARMS}
    med = {a: statistics.median(v) for a, v in ms.items()}
    ci = {a: ratio_interval(per_req["main"], per_req[a]) for a in ARMS}
    print(f"{'arm':>12} {'median ms':>10} {'compl/s':>8} {'vs main':>8} {'95% interval':>13}")
    for a in ARMS:
        print(f"{a:>12} {med[a]:10.1f} {1000 * len(ms[a]) / sum(ms[a]):8.2f} {med[a] / med['main']:8.2f} "
              f"{ci[a][0]:6.2f}-{ci[a][1]:<6.2f}")
    print(json.dumps({"bench": "omp_threads", "threads": args.threads, "requests": args.requests,
                      "rounds": args.rounds, "median_ms": {a: round(v, 2) for a, v in med.items()},
                      "slowdown_vs_main": {a: round(med[a] / med["main"], 3) for a in ARMS},
                      "slowdown_interval": {a: [round(x, 3) for x in ci[a]] for a in ARMS},
                      "same_texts": all(res["texts"] == runs["main"][0]["texts"] for a in ARMS for res in runs[a])}))

if __name__ == "__main__":
    main()
