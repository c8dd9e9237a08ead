"""The busy machine (issue 50): keystroke -> first ghost text while the user's CPU is busy.

A real LSP client (pygls, over stdio) types the start of a function body into llada-lsp in
bursts of `--burst` characters at a human pace (`--cps`), a didChange and an inline
completion request per keystroke (as bench/lsp_latency.py does), then pauses until the
burst's last request is answered, as a user who stops typing waits for the ghost text; this
`--bursts` times per cell, while k CPU-hog processes run on this machine (k in `--hogs`,
default 0 1 2 4). A hog is `python -c` spinning until its time is up (`HOG_LIMIT_S` past the
arm's expected length): local, bounded, it stops by itself, and the bench ends it (by its
pid) when the arm is done. Arms: the engine in process and the daemon (`llada-engine serve`
in a temporary runtime dir, over ws://), each with torch threads chosen by the product
(`auto`: engine.model.threads), fixed to 1, and fixed to nproc.

The cells of an arm take turns: each cell types into a document of its own, `--visit`
bursts at a time, in an order rotated every round, and an arm's hogs are started once and held
stopped (SIGSTOP) except during their cell's turn (SIGCONT). So a drift in the machine's own
load reaches every cell alike, and burst i of every cell types the same characters at the same
place: each burst's latency divided by the same burst's 0-hog latency (`paired_ratio_p50`, the
median of those ratios) compares the same work, which the p50 of a dozen unlike completions
does only roughly.

Per cell: the burst's last keystroke -> its answer, p50/p95 (ms); the share of those answers
that are empty (the requests a newer keystroke superseded are not counted: nothing was to be
shown for them); the empty answers caused by a deadline (the server's empty reasons that say
"timed out"); the tasks runnable on the machine as its bursts ended (median: /proc/loadavg's
count, the cell's own, where the 1-minute load average, `load1` in the JSON, blurs the cells
that take turns within seconds); the fewest of its hogs alive at a turn; its ratio to the same
arm's 0-hog p50, beside the goal (1 + k/c) x that + 10 ms (c: the CPUs this process may use),
and the paired ratio beside 1 + k/c. A table, then one JSON line.

    python bench/busy.py [--quick] [--engines inprocess daemon] [--threads auto 1 nproc]
                         [--hogs 0 1 2 4] [--bursts 12] [--visit 2] [--burst 3] [--cps 10]
                         [--model DIR]

`--quick`: in process, auto threads, 0 and 1 hog, 2 bursts (the smoke test's size).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
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


class Hogs:
    """`n` spin loops started once an arm, held stopped (SIGSTOP); `spin(k)` lets the first k
    run and stops the others, at once, so that the cells of an arm can take turns burst by
    burst (a drift in the machine's own load then reaches every cell alike)."""

    def __init__(self, n: int, seconds: float) -> None:
        self.procs = start_hogs(n, seconds)
        self.spin(0)

    def spin(self, k: int) -> int:
        """Let the first `k` hogs run; the number of them alive."""
        for i, h in enumerate(self.procs):
            with contextlib.suppress(ProcessLookupError):
                os.kill(h.pid, signal.SIGCONT if i < k else signal.SIGSTOP)
        return sum(1 for h in self.procs[:k] if h.poll() is None)

    def close(self) -> int:
        """End them all; how many are left running after that (0)."""
        stop_hogs(self.procs)
        return sum(1 for h in self.procs if h.poll() is None)


class Typist:
    """Types the start of the file's longest body into a document of its own (`name`), one
    burst of `burst` characters at a time, at `cps`; after each burst it waits until the
    burst's last request is answered (a user who stops typing waits for the ghost text)."""

    def __init__(self, client: lc.LladaClient, name: str, burst: int, cps: float) -> None:
        full = DEFAULT_FILE.read_text()
        start, whole = pick_body(full)
        self.client, self.burst, self.cps, self.body = client, burst, cps, whole
        text = f"# {name}\n" + full[:start] + full[start + len(whole):]
        self.uri = (DEFAULT_FILE.parent / name).as_uri()
        lc.open_document(client, self.uri, "python", text)
        self.line, self.col, self.version, self.at = text[: start + len(name) + 3].count("\n"), 0, 1, 0

    async def type_burst(self) -> tuple[float, bool]:
        """The next burst: (its last keystroke -> its answer in ms, whether it showed text)."""
        sent: list[tuple[asyncio.Future[Any], float]] = []
        t0 = time.perf_counter()
        for k, ch in enumerate(self.body[self.at: self.at + self.burst]):
            self.version += 1
            t_key = time.perf_counter()
            pos, answer = lc.keystroke(self.client, self.uri, self.version, self.line, self.col, ch)
            self.line, self.col = pos.line, pos.character
            sent.append((answer, t_key))
            await asyncio.sleep(max(0.0, t0 + (k + 1) / self.cps - time.perf_counter()))
        self.at += self.burst
        answers = await asyncio.gather(*(a for a, _ in sent))
        return (time.perf_counter() - sent[-1][1]) * 1000, bool(lc.item_texts(answers[-1]))


@dataclass
class Cell:
    """One hog count's turns in an arm."""

    typist: Typist
    hogs_alive_min: int
    ms: list[float] = field(default_factory=list)
    shown: list[bool] = field(default_factory=list)
    load1: list[float] = field(default_factory=list)
    runnable: list[int] = field(default_factory=list)  # runnable tasks as each burst ended
    deadline_empty: int = 0
    hogs_left: int = 0


def runnable() -> int:
    """The tasks runnable on this machine now (Linux's /proc/loadavg; -1 elsewhere): unlike the
    load average, it is the cell's own (the cells take turns within seconds)."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        return int(Path("/proc/loadavg").read_text().split()[3].split("/")[0])
    return -1


def timed_out(info: dict[str, Any]) -> int:
    return sum(r["count"] for r in info.get("emptyReasons", []) if "timed out" in r["reason"])


async def type_cells(client: lc.LladaClient, engine: str, threads: str, hogs: list[int],
                     args: argparse.Namespace) -> dict[int, Cell]:
    """Every cell (a hog count) of an arm, its bursts taken in turns: round r types
    `--visit` bursts of each cell in a rotated order, the cell's hogs spinning meanwhile."""
    cells = {k: Cell(Typist(client, f"busy_{engine}_{threads}_{k}.py", args.burst, args.cps), k) for k in hogs}
    per_burst_s = args.burst / args.cps + 30.0  # the engine's own limit bounds a burst's wait
    pool = Hogs(max(hogs), len(hogs) * args.bursts * per_burst_s + HOG_LIMIT_S)
    try:
        for r in range(-(-args.bursts // args.visit)):
            order = hogs[r % len(hogs):] + hogs[: r % len(hogs)]
            for k in order:
                cell = cells[k]
                n = min(args.visit, args.bursts - len(cell.ms))
                cell.load1.append(os.getloadavg()[0])
                before = timed_out(await lc.debug_info(client))
                cell.hogs_alive_min = min(cell.hogs_alive_min, pool.spin(k))
                try:
                    for _ in range(n):
                        ms, shown = await cell.typist.type_burst()
                        cell.runnable.append(runnable())
                        cell.ms.append(ms)
                        cell.shown.append(shown)
                finally:
                    pool.spin(0)
                cell.deadline_empty += timed_out(await lc.debug_info(client)) - before
    finally:
        left = pool.close()
    for cell in cells.values():
        cell.hogs_left = left
    return cells


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
            await Typist(client, "busy_warm.py", 2, args.cps).type_burst()  # the first forwards' one-time costs
            cells = await type_cells(client, engine, threads, hogs, args)
            after = await lc.debug_info(client)
        finally:
            with contextlib.suppress(Exception):  # noqa: BLE001 - the bench goes on to its report
                await client.close()
            if daemon is not None:
                daemon.kill()
                daemon.wait(10)
    quiet = cells[0].ms if 0 in cells else None  # each burst's own quiet latency
    out = []
    for k in hogs:
        c = cells[k]
        empty = sum(1 for shown in c.shown if not shown)
        paired = [ms / q for ms, q in zip(c.ms, quiet, strict=True) if q > 0] if quiet else []
        out.append({"engine": engine, "threads": threads, "hogs": k,
                    "load1": round(statistics.median(c.load1), 2),
                    "runnable": statistics.median(c.runnable) if c.runnable else None,
                    "p50_ms": round(pct(c.ms, 0.5), 1), "p95_ms": round(pct(c.ms, 0.95), 1),
                    "paired_ratio_p50": round(statistics.median(paired), 2) if paired else None,
                    "requests": len(c.ms), "empty": empty,
                    "empty_share": round(empty / max(1, len(c.ms)), 3),
                    "deadline_empty": c.deadline_empty, "hogs_alive_min": c.hogs_alive_min,
                    "hogs_left": c.hogs_left, "engine_threads": after.get("engineInfo", {}).get("threads")})
    return out


def judge(rows: list[dict[str, Any]], cpus: int) -> None:
    """Each row's ratio to its arm's 0-hog p50 in this run, and the goal (1 + k/c) x quiet + 10 ms."""
    for r in rows:
        quiet = next((q["p50_ms"] for q in rows if q["engine"] == r["engine"] and q["threads"] == r["threads"]
                      and q["hogs"] == 0), None)
        if quiet is not None and quiet == quiet:  # NaN: the 0-hog row answered nothing
            mark_goal(r, quiet, cpus)


def mark_goal(r: dict[str, Any], quiet: float, cpus: int) -> None:
    """Row `r` (k = r["hogs"]) against the quiet p50: its ratio, the goal (1 + k/c) x quiet + 10
    ms, and whether its p50 and its paired ratio (the same samples' own ratios: the work cancels
    out) meet it."""
    goal = (1 + r["hogs"] / cpus) * quiet + 10
    r["vs_quiet"] = round(r["p50_ms"] / quiet, 2) if quiet else None
    r["goal_ms"] = round(goal, 1)
    r["meets_goal"] = bool(r["p50_ms"] <= goal)
    if r["paired_ratio_p50"] is not None:
        r["meets_goal_paired"] = bool(r["paired_ratio_p50"] <= 1 + r["hogs"] / cpus + 10 / max(quiet, 1e-9))


Column = tuple[str, int, Callable[[dict[str, Any]], str]]  # header, width, the cell of a row


def print_rows(columns: list[Column], rows: list[dict[str, Any]]) -> None:
    """A right-aligned table: a header line, then a line a row (also bench/vscode_busy.py's)."""
    print(" ".join(f"{h:>{w}}" for h, w, _ in columns))
    for r in rows:
        print(" ".join(f"{cell(r):>{w}}" for _, w, cell in columns))


def table(rows: list[dict[str, Any]], cpus: int) -> None:
    print_rows([("engine", 9, lambda r: r["engine"]), ("threads", 7, lambda r: r["threads"]),
                ("hogs", 4, lambda r: str(r["hogs"])), ("runnable", 8, lambda r: str(r["runnable"])),
                ("p50 ms", 8, lambda r: f"{r['p50_ms']:.1f}"), ("p95 ms", 8, lambda r: f"{r['p95_ms']:.1f}"),
                ("vs 0", 5, lambda r: str(r.get("vs_quiet", float("nan")))),
                ("goal ms", 8, lambda r: str(r.get("goal_ms", float("nan")))),
                ("paired", 6, lambda r: str(r["paired_ratio_p50"])),
                ("goal", 5, lambda r: f"{1 + r['hogs'] / cpus:.2f}"), ("empty", 6, lambda r: f"{r['empty_share']:.3f}"),
                ("deadline", 8, lambda r: str(r["deadline_empty"])),
                ("torch thr", 9, lambda r: str(r["engine_threads"]))], rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="in process, auto threads, 0 and 1 hog, 2 bursts")
    p.add_argument("--engines", nargs="+", default=["inprocess", "daemon"], choices=["inprocess", "daemon"])
    p.add_argument("--threads", nargs="+", default=["auto", "1", "nproc"], choices=["auto", "1", "nproc"])
    p.add_argument("--hogs", nargs="+", type=int, default=[0, 1, 2, 4])
    p.add_argument("--bursts", type=int, default=12, help="bursts typed per cell (one latency sample each)")
    p.add_argument("--visit", type=int, default=2, help="bursts a cell types in a row before the next cell's turn")
    p.add_argument("--burst", type=int, default=3, help="characters a burst")
    p.add_argument("--cps", type=float, default=10.0, help="typing speed, characters/second")
    p.add_argument("--model", help="model directory (default: $LLADA_MODEL or embedded)")
    args = p.parse_args(argv)
    if args.quick:
        args.engines, args.threads, args.hogs, args.bursts, args.visit = ["inprocess"], ["auto"], [0, 1], 2, 1
    if any(k < 0 or k > 64 for k in args.hogs) or len(set(args.hogs)) != len(args.hogs):
        p.error("--hogs: distinct counts, 0..64 processes")
    if args.bursts < 1 or args.visit < 1:
        p.error("--bursts and --visit: at least 1")
    cpus = usable_cpus()
    print(f"busy: {cpus} usable CPUs, load {os.getloadavg()}, {args.bursts} bursts of {args.burst} chars at "
          f"{args.cps}/s a cell", flush=True)
    rows: list[dict[str, Any]] = []
    for engine in args.engines:
        for threads in args.threads:
            rows += asyncio.run(run_arm(engine, threads, args.hogs, args, cpus))
    judge(rows, cpus)
    table(rows, cpus)
    record = {"bench": "busy", "cpus": cpus, "bursts": args.bursts, "burst": args.burst, "cps": args.cps, "rows": rows,
              "deadline_empty": sum(r["deadline_empty"] for r in rows)}
    print(json.dumps(record))
    return 0


if __name__ == "__main__":
    sys.exit(main())
