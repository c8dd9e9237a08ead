"""The busy machine (issue 50): keystroke -> first ghost text while the user's CPU is busy.

A real LSP client (pygls, over stdio) types the start of a function body into llada-lsp in
bursts of `--burst` characters at a human pace (`--cps`), a didChange and an inline
completion request per keystroke (as bench/lsp_latency.py does), then pauses until the
burst's last request is answered, as a user who stops typing waits for the ghost text; this
`--bursts` times per cell, while k CPU-hog processes run on this machine (k in `--hogs`,
default 0 1 2 4). A hog is `python -c` spinning until its time is up (`HOG_LIMIT_S` past the
cell's expected length): local, bounded, it stops by itself, and the bench ends it (by its
pid) when the cell is done. Arms: the engine in process and the daemon (`llada-engine serve`
in a temporary runtime dir, over ws://), each with torch threads chosen by the product
(`auto`: engine.model.threads), fixed to 1, and fixed to nproc.

Per cell: the burst's last keystroke -> its answer, p50/p95 (ms); the share of those answers
that are empty (the requests a newer keystroke superseded are not counted: nothing was to be
shown for them); and the empty answers caused by a deadline (the server's empty reasons that say "timed out"). Each row also
has the 1-minute load average read before it (the machine is shared: a "0 hogs" row is only
as quiet as the load says) and its ratio to the same arm's 0-hog p50 in the same run, beside
the goal (1 + k/c) (c: the CPUs this process may use) and its +10 ms. A table, then one JSON
line.

    python bench/busy.py [--quick] [--engines inprocess daemon] [--threads auto 1 nproc]
                         [--hogs 0 1 2 4] [--bursts 8] [--burst 3] [--cps 10] [--model DIR]

`--quick`: in process, auto threads, 0 and 1 hog, 2 bursts (the smoke test's size).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.lsp_latency import DEFAULT_FILE, pct, pick_body  # noqa: E402
from engine.daemon import runtime  # noqa: E402
from engine.model.threads import usable_cpus  # noqa: E402
from llada_lsp import client as lc  # noqa: E402

HOG_LIMIT_S = 120.0  # a hog spins at most this long past its cell's expected end, then exits
HOG_CODE = "import sys, time\nend = time.time() + float(sys.argv[1])\nwhile time.time() < end:\n    pass\n"


def start_hogs(k: int, seconds: float) -> list[subprocess.Popen[bytes]]:
    return [subprocess.Popen([sys.executable, "-c", HOG_CODE, str(seconds)]) for _ in range(k)]


def stop_hogs(hogs: list[subprocess.Popen[bytes]]) -> None:
    for h in hogs:
        with contextlib.suppress(ProcessLookupError):
            h.kill()
        h.wait(10)


def child_env() -> dict[str, str]:
    """The servers' environment: no OMP_NUM_THREADS (it caps the product's own choice)."""
    return {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "TRITON_INTERPRET")}


def start_daemon(run: Path, threads: int | None, model: str | None) -> tuple[subprocess.Popen[bytes], dict[str, Any]]:
    """`llada-engine serve` registered in its own runtime dir `run`; (process, runtime info)."""
    runtime.secure_dir(run)
    cmd = [sys.executable, "-m", "engine.daemon.cli", "serve", "--port", "0",
           "--token-file", str(run / runtime.TOKEN_NAME), "--idle-exit", "0"]
    cmd += ["--threads", str(threads)] if threads else []
    cmd += ["--model", model] if model else []
    env = {**child_env(), "LLADA_RUNTIME_DIR": str(run), "PYTHONPATH": str(ROOT)}
    with (run / "daemon.log").open("ab") as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    waited = 0.0
    while True:
        info = runtime.read_runtime(run)
        if info is not None and info.get("pid") == proc.pid:
            return proc, info
        if proc.poll() is not None or waited > 600:
            raise RuntimeError((run / "daemon.log").read_text()[-3000:])
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(0.1)
        waited += 0.1


async def type_bursts(client: lc.LladaClient, name: str, bursts: int, burst: int, cps: float) -> dict[str, Any]:
    """Type `bursts` bursts of `burst` characters of the file's longest body into a document of
    its own (`name`), each followed by a pause until its last request is answered: that
    request's latency, and whether it showed anything."""
    full = DEFAULT_FILE.read_text()
    start, whole = pick_body(full)
    body = whole[: bursts * burst]
    text = f"# {name}\n" + full[:start] + full[start + len(whole):]
    uri = (DEFAULT_FILE.parent / name).as_uri()
    lc.open_document(client, uri, "python", text)
    line, col = text[: start + len(name) + 3].count("\n"), 0
    last: list[tuple[float, bool]] = []
    version = 1
    for b in range(0, len(body), burst):
        sent: list[tuple[asyncio.Future[Any], float]] = []
        t0 = time.perf_counter()
        for k, ch in enumerate(body[b: b + burst]):
            version += 1
            t_key = time.perf_counter()
            pos, answer = lc.keystroke(client, uri, version, line, col, ch)
            line, col = pos.line, pos.character
            sent.append((answer, t_key))
            await asyncio.sleep(max(0.0, t0 + (k + 1) / cps - time.perf_counter()))
        answers = await asyncio.gather(*(a for a, _ in sent))
        t_key = sent[-1][1]
        last.append(((time.perf_counter() - t_key) * 1000, bool(lc.item_texts(answers[-1]))))
    return {"first_ms": [ms for ms, _ in last], "requests": len(last), "empty": sum(1 for _, shown in last if not shown)}


async def run_arm(engine: str, threads: str, hogs: list[int], args: argparse.Namespace, cpus: int
                  ) -> list[dict[str, Any]]:
    fixed = {"auto": None, "1": 1, "nproc": cpus}[threads]
    with tempfile.TemporaryDirectory(prefix="llada-busy-") as tmp:
        run = Path(tmp)
        init: dict[str, Any] = {"mode": "speedy", "speculative": False, "workspaceContext": False}
        init |= {"model": args.model} if args.model else {}
        daemon = None
        if engine == "daemon":
            daemon, info = start_daemon(run / "d", fixed, args.model)
            init |= {"engine": info["url"], "engineToken": info["token"]}
        else:
            init |= {"engine": "inprocess", "threads": fixed or 0}
        client = lc.LladaClient("llada-busy")
        try:
            await client.start(init, lc.server_command(), env={**child_env(), "LLADA_RUNTIME_DIR": str(run)})
            await type_bursts(client, "busy_warm.py", 1, 2, args.cps)  # the first forwards' one-time costs
            out = []
            for k in hogs:
                load = os.getloadavg()[0]
                procs = start_hogs(k, args.bursts * args.burst / args.cps + HOG_LIMIT_S)
                try:
                    before = await lc.debug_info(client)
                    res = await type_bursts(client, f"busy_{engine}_{threads}_{k}.py", args.bursts, args.burst, args.cps)
                    after = await lc.debug_info(client)
                finally:
                    stop_hogs(procs)
                left = sum(1 for h in procs if h.poll() is None)
                timed_out = sum(r["count"] for r in after.get("emptyReasons", []) if "timed out" in r["reason"]) - \
                    sum(r["count"] for r in before.get("emptyReasons", []) if "timed out" in r["reason"])
                out.append({"engine": engine, "threads": threads, "hogs": k, "load1": round(load, 2),
                            "p50_ms": round(pct(res["first_ms"], 0.5), 1), "p95_ms": round(pct(res["first_ms"], 0.95), 1),
                            "requests": res["requests"], "empty": res["empty"],
                            "empty_share": round(res["empty"] / max(1, res["requests"]), 3),
                            "deadline_empty": timed_out, "hogs_left": left,
                            "engine_threads": after.get("engineInfo", {}).get("threads")})
            return out
        finally:
            with contextlib.suppress(Exception):  # noqa: BLE001 - the bench goes on to its report
                await client.close()
            if daemon is not None:
                daemon.kill()
                daemon.wait(10)


def judge(rows: list[dict[str, Any]], cpus: int) -> None:
    """Each row's ratio to its arm's 0-hog p50 in this run, and the goal (1 + k/c) x quiet + 10 ms."""
    for r in rows:
        quiet = next((q["p50_ms"] for q in rows if q["engine"] == r["engine"] and q["threads"] == r["threads"]
                      and q["hogs"] == 0), None)
        if quiet is None or quiet != quiet:  # no 0-hog row, or it answered nothing
            continue
        goal = (1 + r["hogs"] / cpus) * quiet + 10
        r["vs_quiet"] = round(r["p50_ms"] / quiet, 2) if quiet else None
        r["goal_ms"] = round(goal, 1)
        r["meets_goal"] = bool(r["p50_ms"] <= goal)


def table(rows: list[dict[str, Any]]) -> None:
    print(f"{'engine':>9} {'threads':>7} {'hogs':>4} {'load1':>6} {'p50 ms':>8} {'p95 ms':>8} {'vs 0':>5} "
          f"{'goal ms':>8} {'empty':>6} {'deadline':>8} {'torch thr':>9}")
    for r in rows:
        print(f"{r['engine']:>9} {r['threads']:>7} {r['hogs']:>4} {r['load1']:>6.2f} {r['p50_ms']:>8.1f} "
              f"{r['p95_ms']:>8.1f} {r.get('vs_quiet', float('nan')):>5} {r.get('goal_ms', float('nan')):>8} "
              f"{r['empty_share']:>6.3f} {r['deadline_empty']:>8} {r['engine_threads']!s:>9}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="in process, auto threads, 0 and 1 hog, 2 bursts")
    p.add_argument("--engines", nargs="+", default=["inprocess", "daemon"], choices=["inprocess", "daemon"])
    p.add_argument("--threads", nargs="+", default=["auto", "1", "nproc"], choices=["auto", "1", "nproc"])
    p.add_argument("--hogs", nargs="+", type=int, default=[0, 1, 2, 4])
    p.add_argument("--bursts", type=int, default=8, help="bursts typed per cell (one latency sample each)")
    p.add_argument("--burst", type=int, default=3, help="characters a burst")
    p.add_argument("--cps", type=float, default=10.0, help="typing speed, characters/second")
    p.add_argument("--model", help="model directory (default: $LLADA_MODEL or embedded)")
    args = p.parse_args(argv)
    if args.quick:
        args.engines, args.threads, args.hogs, args.bursts = ["inprocess"], ["auto"], [0, 1], 2
    if any(k < 0 or k > 64 for k in args.hogs):
        p.error("--hogs: 0..64 processes")
    cpus = usable_cpus()
    print(f"busy: {cpus} usable CPUs, load {os.getloadavg()}, {args.bursts} bursts of {args.burst} chars at "
          f"{args.cps}/s a cell", flush=True)
    rows: list[dict[str, Any]] = []
    for engine in args.engines:
        for threads in args.threads:
            rows += asyncio.run(run_arm(engine, threads, args.hogs, args, cpus))
    judge(rows, cpus)
    table(rows)
    record = {"bench": "busy", "cpus": cpus, "bursts": args.bursts, "burst": args.burst, "cps": args.cps, "rows": rows,
              "deadline_empty": sum(r["deadline_empty"] for r in rows)}
    print(json.dumps(record))
    return 0


if __name__ == "__main__":
    sys.exit(main())
