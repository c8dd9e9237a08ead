"""Concurrency benchmark of the engine daemon: batched scheduler vs one request at a time.

Starts a daemon on loopback (temporary runtime dir), builds a pool of editing sessions from
real files (a session types through one document: R completions, each a few characters
further, as an editor asks while the user types; infill tasks cut from held-out source
files), and for N = 1, 2, 4, 8 clients, each on its own connection, lets the clients draw
sessions from the shared pool until it is empty (N concurrent sessions at all times but the
last few: the "max concurrency" load of serving benchmarks). It measures completions/s,
tokens/s and p50/p95 latency. The baseline serves the same pool one request at a time on one
connection, in the same run, after an unmeasured warm-up round; `--rounds R` runs every arm R
times, alternated, so that the machine's drift lands on every arm alike (the figures pool the
rounds; the JSON also lists each round's ratio). Every run tags its prompts so that no run
reuses another's prompt cache. Prints a table and ends with one JSON line:
  {"clients": {N: {"throughput": x, "p95_ms": x, ...}}, "batched_vs_sequential_at_8": x}

    python bench/concurrency.py [--quick] [--model DIR] [--clients 1,2,4,8] [--sessions S]
                                [--requests R] [--threads T] [--rounds R]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine.api import CompletionRequest, Plan  # noqa: E402
from engine.daemon import runtime  # noqa: E402
from llada_lsp.engines.ws_engine import WsConnection  # noqa: E402


@dataclass
class Result:
    latency_ms: float
    tokens: int
    reason: str
    end: float = 0.0  # time.perf_counter() at its done event
    prefill: int = 0  # prompt tokens this request fed (not found in the prompt cache)
    reused: int = 0  # prompt tokens restored from the prompt cache


Task = tuple[str, str, Plan]  # prefix, suffix, plan


def cut_points(n: int, seed: int, max_tokens: int) -> list[tuple[str, str, str, Plan]]:
    """n (prefix, typed continuation, suffix, plan) from held-out files (bench.tasks), else from
    this repository's sources."""
    try:
        from bench.tasks import make_tasks

        tasks = make_tasks(per_kind=-(-n // 3) + 2, seed=seed)
        out = [(t.prefix, t.middle, t.suffix, Plan(**{**t.plan.to_json(), "max_tokens": min(t.plan.max_tokens, max_tokens)}))
               for t in tasks]
        if len(out) >= n:
            return random.Random(seed).sample(out, n)
    except Exception as e:  # noqa: BLE001 - any failure falls back to the repository's files
        print(f"(bench.tasks unavailable: {type(e).__name__}: {e}; using this repository's files)", file=sys.stderr)
    rng = random.Random(seed)
    files = sorted(p for d in ("engine", "llada_lsp", "bench") for p in (ROOT / d).glob("*.py"))
    out = []
    while len(out) < n:
        text = rng.choice(files).read_text()
        lines = text.split("\n")
        i = rng.randrange(1, len(lines))
        line = lines[i]
        if not line.strip():
            continue
        at = sum(len(q) + 1 for q in lines[:i]) + len(line) - len(line.lstrip())
        out.append((text[:at], text[at:at + 200], text[at + 200:], Plan(max_tokens=max_tokens, stop="line")))
    return out


def sessions(n: int, per_session: int, seed: int, max_tokens: int, cold: bool) -> list[list[Task]]:
    """n sessions of requests. Typing (default): a session types the real continuation of its
    file a few characters per request, the prefix window's start fixed (as the language server
    keeps it) and the suffix unchanged, so the prompt cache prefills only the new tokens, as in
    an editor. Cold: unrelated cut points, every request a full prefill."""
    if cold:
        cuts = cut_points(n * per_session, seed, max_tokens)
        return [[(c[0][-1500:], c[2][:400], c[3]) for c in cuts[k * per_session:(k + 1) * per_session]]
                for k in range(n)]
    out = []
    for pre, typed, suf, plan in cut_points(n, seed, max_tokens):
        typed = (typed + suf)[: 8 * per_session]
        suffix = (typed + suf)[8 * per_session:][:400] if len(typed) == 8 * per_session else suf[:400]
        base = pre[-1000:]
        out.append([(base + typed[: 8 * i], suffix, plan) for i in range(per_session)])
    return out


def default_model() -> str:
    try:
        return str(runtime.resolve_model(None))
    except runtime.ModelNotFound:
        snap = ROOT / "runs" / "embedded" / "latest"
        if (snap / "config.json").exists():
            return str(snap)
        raise


def start_daemon(model: str, max_batch: int, threads: int | None, run_dir: Path,
                 cold: bool, dtype: str, device: str = "cpu") -> tuple[subprocess.Popen[bytes], dict]:
    env = dict(os.environ, LLADA_RUNTIME_DIR=str(run_dir), HF_HUB_OFFLINE="1")
    cmd = [sys.executable, "-m", "engine.daemon.cli", "serve", "--model", model, "--port", "0", "--no-token",
           "--max-batch", str(max_batch), "--dtype", dtype,
           "--device", device] + (["--prompt-cache", "0"] if cold else [])
    if threads:
        cmd += ["--threads", str(threads)]
    log = (run_dir / "bench-daemon.log").open("wb")
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"daemon exited: {(run_dir / 'bench-daemon.log').read_text()[-2000:]}")
        info = runtime.read_runtime(run_dir)
        if info is not None and info.get("pid") == proc.pid:
            return proc, info
        time.sleep(0.1)
    proc.terminate()
    raise SystemExit("daemon not ready in 300 s")


async def one(conn: WsConnection, rid: str, doc: str, task: Task) -> Result:
    t0 = time.perf_counter()
    last = None
    async for ev in conn.complete(CompletionRequest(rid, doc, task[0], task[1], task[2])):
        last = ev
    ms = (time.perf_counter() - t0) * 1000
    if last is None or last.kind != "done":
        raise RuntimeError(f"request {rid} failed: {last}")
    st = last.stats or {}
    return Result(ms, int(st.get("tokens", 0)), str(last.reason), time.perf_counter(),
                  int(st.get("prefill_tokens", 0)), int(st.get("reused_tokens", 0)))


class Pool:
    """The shared queue of sessions; remembers when the last one was handed out."""

    def __init__(self, work: list[list[Task]], tag: str) -> None:
        self.items = [(k, tagged(tasks, tag)) for k, tasks in enumerate(work)]
        self.drained = 0.0

    def take(self) -> tuple[int, list[Task]] | None:
        if not self.items:
            return None
        item = self.items.pop(0)
        if not self.items:
            self.drained = time.perf_counter()
        return item


async def client(url: str, tag: str, pool: Pool) -> list[Result]:
    """One connection: draws sessions from `pool` until it is empty, each a document of its
    own (the prompt cache is keyed by it), its completions back to back."""
    conn = await WsConnection.open(url)
    out: list[Result] = []
    try:
        while (item := pool.take()) is not None:
            k, tasks = item
            out += [await one(conn, f"{tag}-{k}-{i}", f"bench://{tag}-{k}", t) for i, t in enumerate(tasks)]
        return out
    finally:
        await conn.close()


@dataclass
class Part:
    """One arm's run in one round: its results, wall time, start, when its pool ran out, and
    the daemon's stats before and after."""

    results: list[Result]
    wall: float
    t0: float = 0.0
    drained: float = 0.0
    before: dict | None = None
    after: dict | None = None


def summary(parts: list[Part]) -> dict[str, float]:
    """Throughput over the arm's runs (every round), and (`drained`: when a run's pool ran out)
    over the part of each run when every client had work ("steady": the drain tail, when fewer
    sessions than clients are left, excluded). The daemon's stats give the average batch."""
    results = [r for p in parts for r in p.results]
    wall = sum(p.wall for p in parts)
    lat = sorted(r.latency_ms for r in results)
    p95 = lat[min(len(lat) - 1, int(round(0.95 * (len(lat) - 1))))]
    out = {"throughput": len(results) / wall, "tokens_per_s": sum(r.tokens for r in results) / wall,
           "p50_ms": statistics.median(lat), "p95_ms": p95, "completions": len(results), "wall_s": wall,
           "prompt_reuse": sum(r.reused for r in results) / max(1, sum(r.reused + r.prefill for r in results))}
    steady = [p for p in parts if p.drained > p.t0]
    if steady:
        out["steady_throughput"] = (sum(1 for p in steady for r in p.results if r.end <= p.drained)
                                    / sum(p.drained - p.t0 for p in steady))
    stats = [(p.before, p.after) for p in parts if p.before is not None and p.after is not None]
    if stats:
        fw = sum(a["forwards"] - b["forwards"] for b, a in stats)
        out["avg_batch"] = sum(a["batched_rows"] - b["batched_rows"] for b, a in stats) / max(1, fw)
        out["forward_share"] = sum(a["forward_ms"] - b["forward_ms"] for b, a in stats) / 1000 / wall
    return out


def tagged(tasks: list[Task], tag: str) -> list[Task]:
    """The suffix comes first in the prompt: a per-run tag at its start keeps one run from
    hitting the prompt cache entries of another (same length for every run)."""
    return [(pre, f"# {tag}\n{suf}", plan) for pre, suf, plan in tasks]


async def timed(url: str, stats: WsConnection, n: int, pool: Pool, tag: str) -> Part:
    """One arm: n clients (0: one connection, one request at a time) until `pool` is empty."""
    before = (await stats.query("stats"))["stats"]
    t0 = time.perf_counter()
    if n:
        parts = await asyncio.gather(*(client(url, f"{tag}-{c}", pool) for c in range(n)))
        results = [r for p in parts for r in p]
    else:
        results = await client(url, tag, pool)
    wall = time.perf_counter() - t0
    after = (await stats.query("stats"))["stats"]
    return Part(results, wall, t0, pool.drained, before, after)


async def run(url: str, clients: list[int], work: list[list[Task]], rounds: int = 1) -> dict:
    """Every arm (each client count, then one request at a time) in turn, `rounds` times: the
    machine's drift lands on every arm alike, and each round gives a ratio of its own."""
    # warm-up, not measured: the first forwards of each batch size and length pay one-time
    # kernel and allocator set-up that would otherwise land on whichever run comes first
    n_max = max(clients)
    warm = Pool([w[:1] for w in work[:n_max]], "warm")
    await asyncio.gather(*(client(url, f"w-{c}", warm) for c in range(n_max)))
    await client(url, "w-seq", Pool(work[:1], "warm1"))
    parts: dict[int, list[Part]] = {n: [] for n in clients}
    seq: list[Part] = []
    stats = await WsConnection.open(url)
    try:
        for k in range(rounds):
            for n in clients:
                parts[n].append(await timed(url, stats, n, Pool(work, f"b{n:02d}r{k}"), f"b{n}r{k}"))
            # the same pool, one request at a time, session after session
            seq.append(await timed(url, stats, 0, Pool(work, f"seqr{k}"), f"seq{k}"))
    finally:
        await stats.close()
    n_ref = 8 if 8 in clients else n_max
    per_round = [summary([parts[n_ref][k]])["throughput"] / summary([seq[k]])["throughput"] for k in range(rounds)]
    return {"clients": {n: summary(ps) for n, ps in parts.items()}, "sequential": summary(seq),
            "per_round": per_round}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", help="model directory or name (default: the embedded model)")
    ap.add_argument("--clients", default="1,2,4,8")
    ap.add_argument("--sessions", type=int, help="editing sessions in the pool (default 48, quick 24)")
    ap.add_argument("--requests", type=int, help="completions per session (default 4, quick 2)")
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, help="torch threads of the daemon")
    ap.add_argument("--device", default="cpu", help="the daemon's --device (cpu | cuda | auto)")
    ap.add_argument("--dtype", default="auto", help="the daemon's --dtype (auto | float32 | bfloat16)")
    ap.add_argument("--quick", action="store_true", help="fewer requests: under 2 minutes")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cold", action="store_true", help="unrelated requests, prompt cache off (full prefills)")
    ap.add_argument("--rounds", type=int, default=1, help="run every arm this many times, alternated "
                    "(the figures pool the rounds; the JSON also gives each round's ratio)")
    args = ap.parse_args()
    clients = [int(c) for c in args.clients.split(",")]
    per_session = args.requests or (2 if args.quick else 4)
    n_sessions = args.sessions or (24 if args.quick else 48)
    model = args.model or default_model()
    work = sessions(n_sessions, per_session, args.seed, args.max_tokens, args.cold)
    with tempfile.TemporaryDirectory(prefix="llada-bench-") as tmp:
        t_load = time.perf_counter()
        proc, info = start_daemon(model, max(clients), args.threads, Path(tmp), args.cold, args.dtype,
                                   args.device)
        print(f"daemon {info['url']} model {info['model']} ready in {time.perf_counter() - t_load:.1f} s; "
              f"{n_sessions} sessions of {per_session} completions, max_tokens {args.max_tokens}, "
              f"{'cold' if args.cold else 'typing'} scenario", file=sys.stderr)
        try:
            res = asyncio.run(run(str(info["url"]), clients, work, args.rounds))
        finally:
            proc.terminate()
            proc.wait(30)
    seq = res["sequential"]
    print(f"{'clients':>7} {'compl/s':>8} {'tok/s':>8} {'p50 ms':>8} {'p95 ms':>8} {'vs seq':>7} "
          f"{'steady':>7} {'batch':>6} {'fwd %':>6} {'reuse':>6}")

    def row(name: str, s: dict, ratio: float) -> str:
        steady = s.get("steady_throughput", s["throughput"]) / seq["throughput"]
        return (f"{name:>7} {s['throughput']:8.2f} {s['tokens_per_s']:8.1f} {s['p50_ms']:8.0f} {s['p95_ms']:8.0f} "
                f"{ratio:7.2f} {steady:7.2f} {s.get('avg_batch', 0):6.2f} {100 * s.get('forward_share', 0):6.0f} {s['prompt_reuse']:6.2f}")
    for n, s in res["clients"].items():
        print(row(str(n), s, s["throughput"] / seq["throughput"]))
    print(row("seq", seq, 1.0) + f"   (the same {seq['completions']} requests, one at a time)")
    print("vs seq: whole-run throughput over the baseline's; steady: over the part of the run when "
          "the pool still had sessions for every client; batch: rows per forward; fwd %: share of "
          "the wall time in forwards; reuse: share of prompt tokens restored from the prompt cache "
          "(the rest is prefilled, which batching cannot speed up on a compute-bound CPU)")
    n_ref = 8 if 8 in res["clients"] else max(res["clients"])
    final = {"clients": {str(n): {k: round(v, 3) for k, v in s.items()} for n, s in res["clients"].items()},
             "sequential": {k: round(v, 3) for k, v in seq.items()},
             "batched_vs_sequential_at_8": round(res["clients"][n_ref]["throughput"] / seq["throughput"], 3),
             "steady_batched_vs_sequential_at_8": round(res["clients"][n_ref].get("steady_throughput", 0) / seq["throughput"], 3),
             "threads": args.threads,
             "model": info["model"], "dtype": args.dtype, "sessions": n_sessions, "requests_per_session": per_session, "scenario": "cold" if args.cold else "typing",
             "device": args.device, "rounds": args.rounds,
             "per_round_batched_vs_sequential": [round(x, 3) for x in res["per_round"]]}
    print(json.dumps(final))


if __name__ == "__main__":
    main()
