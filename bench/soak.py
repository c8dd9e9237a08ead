"""Soak: typing storms through a real LSP client into llada-lsp over the `auto` engine daemon,
with the daemon killed, frozen and restarted mid-run (issue 31).

The client (pygls, over stdio) opens a few documents and types bursts into each of them at
once ("storms": a didChange and an inline completion request per keystroke, requests never
awaited before the next key, as editors do). Between storms it injects faults into the
daemon the server uses (a temporary runtime dir; never the user's): SIGKILL; SIGSTOP then
SIGCONT later; SIGSTOP then SIGKILL; and a clean restart (`runtime.stop_daemon`). Measured:

- `max_inflight_per_doc`: most requests of one document streaming from the daemon at once
  (the server's counter; newest-per-document wins, so 1: a superseded, cancelled or timed-out
  job stops counting at once, whatever its transport hears of it later);
- `mem_growth`: the server's RSS at the end over its RSS after the warm-up storms, minus 1;
- `p95_first_ms_start` / `_end`: keystroke -> answer of the last request of each storm (the
  suggestion a user waits for once typing pauses), p95 over the first / last storms;
- `errors`: JSON-RPC error answers; `lost`: requests never answered (waited for past the
  server's engine deadline); `stale`: non-empty answers whose completion is for another
  document version than the request's (from its `llada/refine`);
- `recovery_s_killed` / `recovery_s_frozen`: the signal -> the server's `llada/status`
  "ready" again (the worst of each kind).

Goals: 0 lost, 0 stale, 0 errors, mem growth < 5%, p95 end <= 1.5 x start, recovery <= 5 s.
Prints a table, then one JSON line.

    python bench/soak.py [--quick] [--storms N] [--docs N] [--cps N] [--model DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lsprotocol import types as t

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from engine.daemon import runtime  # noqa: E402 - after the path fix, for `python bench/soak.py`
from llada_lsp import client as lc  # noqa: E402

FILES = [("tests/llada_lsp/data/shapes.py.txt", "python"), ("tests/llada_lsp/data/queue.ts", "typescript"),
         ("tests/llada_lsp/data/stack.go", "go"), ("tests/llada_lsp/data/matrix.rs", "rust")]
LINES = {"python": "    total = compute(values, {k}) + offset\n",
         "typescript": "  const total{k} = this.items.length + {k};\n",
         "go": "\ttotal{k} := len(s.items) + {k}\n", "rust": "    let total{k} = self.rows * {k};\n"}


def p95(xs: list[float]) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(0.95 * (len(xs) - 1))))]


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


@dataclass
class Doc:
    uri: str
    lang: str
    line: int  # where the storms type: the start of this line
    version: int = 1


@dataclass
class Sent:
    doc: Doc
    version: int
    t_key: float
    storm: int
    last: bool = False  # the storm's last keystroke in its document
    t_answer: float | None = None
    fut: asyncio.Future[Any] | None = None
    items: int = 0
    cid: str | None = None
    error: str | None = None


@dataclass
class Soak:
    client: lc.LladaClient = field(default_factory=lambda: lc.LladaClient("llada-soak"))
    sent: list[Sent] = field(default_factory=list)
    rss: list[int] = field(default_factory=list)  # the server's RSS (kB) after each storm

    def __post_init__(self) -> None:
        @self.client.feature("window/showMessage")
        def _show(ls: Any, params: Any) -> None:
            print("  server says:", lc.plain(params).get("message"), file=sys.stderr)

    async def wait_state(self, state: str, after: float, timeout: float) -> float:
        """The time of the first `state` status after `after` (waits for it)."""
        return await self.client.until(lambda: next(
            (n.at for n in self.client.notes if n.method == "llada/status" and n.at >= after
             and n.params["state"] == state), None), timeout)

    def refine_versions(self) -> dict[str, int]:
        """Completion id -> the document version its first `llada/refine` is for."""
        out: dict[str, int] = {}
        for r in self.client.refines:
            out.setdefault(str(r["completionId"]), int(r["version"]))
        return out

    def key(self, doc: Doc, col: int, ch: str, storm: int, last: bool) -> None:
        doc.version += 1
        t_key = time.perf_counter()
        pos, fut = lc.keystroke(self.client, doc.uri, doc.version, doc.line, col, ch)
        doc.line = pos.line
        s = Sent(doc, doc.version, t_key, storm, last)
        self.sent.append(s)
        s.fut = fut
        fut.add_done_callback(lambda f: self._answered(s, f))

    def _answered(self, s: Sent, fut: asyncio.Future[Any]) -> None:
        s.t_answer = time.perf_counter()
        if fut.cancelled() or fut.exception() is not None:
            s.error = "cancelled" if fut.cancelled() else repr(fut.exception())
            return
        res = fut.result()
        s.items = len(res.items if isinstance(res, t.InlineCompletionList) else (res or []))
        s.cid = lc.completion_id(res)

    async def storm(self, docs: list[Doc], k: int, cps: float) -> None:
        """Every document gets one line typed, all at once, at `cps` keys per second each; then
        the user pauses until the suggestions after the last keys (the Enter) arrive."""
        async def type_line(doc: Doc) -> None:
            text = LINES[doc.lang].format(k=k)
            t0 = time.perf_counter()
            for i, ch in enumerate(text):
                self.key(doc, i, ch, k, i == len(text) - 1)
                await asyncio.sleep(max(0.0, t0 + (i + 1) / cps - time.perf_counter()))  # typing pace
        await asyncio.gather(*(type_line(d) for d in docs))
        await self.settle([s for s in self.sent if s.storm == k and s.last], 45.0)
        if self.client.server_pid:
            self.rss.append(rss_kb(self.client.server_pid))
            if os.environ.get("LLADA_SOAK_SIGNAL_SERVER"):  # an instrumented server dumps its heap
                os.kill(self.client.server_pid, signal.SIGUSR1)

    @staticmethod
    async def settle(sent: list[Sent], timeout: float) -> None:
        """Wait (at most `timeout`) for these requests' answers."""
        futs = [s.fut for s in sent if s.fut is not None and not s.fut.done()]
        if futs:
            await asyncio.wait(futs, timeout=timeout)


def last_latencies(sent: list[Sent], storms: range) -> list[float]:
    return [(s.t_answer - s.t_key) * 1000 for s in sent
            if s.last and s.storm in storms and s.t_answer is not None and s.error is None]


def daemon_pid(soak_info: dict[str, Any]) -> int:
    return int(soak_info["engineInfo"]["daemon_pid"])


async def fault(soak: Soak, kind: str, run_dir: Path, docs: list[Doc], k: int, cps: float,
                recovery: dict[str, list[float]], frozen: list[int]) -> None:
    """Inject one fault while a storm is typed; record the time until the server is ready."""
    pid = daemon_pid(await lc.debug_info(soak.client))
    storm = asyncio.ensure_future(soak.storm(docs, k, cps))
    await asyncio.sleep(0.3)  # into the storm
    t0 = time.perf_counter()
    if kind == "kill":
        os.kill(pid, signal.SIGKILL)
    elif kind == "freeze":
        os.kill(pid, signal.SIGSTOP)
        frozen.append(pid)
    else:  # a clean restart: stop it, the server starts another
        await asyncio.to_thread(runtime.stop_daemon, run_dir)
    await soak.wait_state("error", t0, 30)
    ready = await soak.wait_state("ready", t0, 120)
    await storm
    if kind in ("kill", "freeze"):
        recovery[kind].append(ready - t0)
    print(f"  {kind:<8} daemon {pid}: ready again after {ready - t0:.2f} s", file=sys.stderr)


def thaw(frozen: list[int], kill: bool) -> None:
    """The frozen daemons: continued (they end on the SIGTERM the server sent) or killed."""
    while frozen:
        pid = frozen.pop()
        try:
            os.kill(pid, signal.SIGKILL if kill else signal.SIGCONT)
        except ProcessLookupError:
            pass


async def open_docs(soak: Soak, n: int) -> list[Doc]:
    docs = []
    for i in range(n):
        rel, lang = FILES[i % len(FILES)]
        text = (ROOT / rel).read_text()
        uri = (ROOT / f"soak{i}{Path(rel).suffix}").as_uri()
        lc.open_document(soak.client, uri, lang, text)
        docs.append(Doc(uri, lang, line=min(text.count("\n"), 12)))
    return docs


async def run(args: argparse.Namespace, run_dir: Path) -> dict[str, Any]:
    soak = Soak()
    env = {**os.environ, "LLADA_RUNTIME_DIR": str(run_dir), "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
           "PYTHONPATH": str(ROOT)}
    init: dict[str, Any] = {"engine": "auto", "speculative": False, "rescueAlternatives": 0,
                            "maxTokens": {"line": 16, "statements": 16, "block": 16}}
    if args.model:
        init["model"] = args.model
    server = lc.server_command(args.server_script)
    await soak.client.start(init, [*server, "--log-file", str(run_dir.parent / "server.log")], env=env,
                            caps=t.ClientCapabilities(), transient_errors=True)
    server_pid = soak.client.server_pid
    docs = await open_docs(soak, args.docs)
    recovery: dict[str, list[float]] = {"kill": [], "freeze": []}
    frozen: list[int] = []
    warm, measure = args.storms // 4, max(2, args.storms // 4)
    plan = (["kill", "freeze"] if args.quick else ["kill", "freeze", "thaw", "restart", "freeze", "thaw-kill", "kill"])
    if args.faults is not None:
        plan = [f for f in args.faults.split(",") if f]
    k = 0
    for _ in range(warm):
        await soak.storm(docs, (k := k + 1), args.cps)
    rss_warm = rss_kb(server_pid)
    start = range(k + 1, k + measure + 1)
    for _ in range(measure):
        await soak.storm(docs, (k := k + 1), args.cps)
    middle = max(1, (args.storms - warm - 2 * measure) // max(1, len(plan)))
    for step in plan or ["none"]:
        if step.startswith("thaw"):
            thaw(frozen, kill=step == "thaw-kill")
        elif step != "none":
            await fault(soak, step, run_dir, docs, (k := k + 1), args.cps, recovery, frozen)
        for _ in range(middle):
            await soak.storm(docs, (k := k + 1), args.cps)
    thaw(frozen, kill=False)
    end = range(k + 1, k + measure + 1)
    for _ in range(measure):
        await soak.storm(docs, (k := k + 1), args.cps)
    await soak.settle(soak.sent, 45.0)  # past the server's engine deadline (30 s)
    rss_end = rss_kb(server_pid)
    info = await lc.debug_info(soak.client)
    await soak.client.close()
    versions = soak.refine_versions()
    stale = sum(1 for s in soak.sent if s.cid and s.cid in versions and versions[s.cid] != s.version)
    return {
        "max_inflight_per_doc": int(info.get("engine", {}).get("max_running_per_doc", 0)),
        "mem_growth": round(rss_end / max(1, rss_warm) - 1, 4),
        "p95_first_ms_start": round(p95(last_latencies(soak.sent, start)), 1),
        "p95_first_ms_end": round(p95(last_latencies(soak.sent, end)), 1),
        "errors": sum(1 for s in soak.sent if s.error), "lost": sum(1 for s in soak.sent if s.t_answer is None),
        "stale": stale,
        "recovery_s_killed": round(max(recovery["kill"]), 2) if recovery["kill"] else None,
        "recovery_s_frozen": round(max(recovery["freeze"]), 2) if recovery["freeze"] else None,
        "requests": len(soak.sent), "answered_items": sum(1 for s in soak.sent if s.items), "storms": k,
        "docs": len(docs), "rss_kb_warm": rss_warm, "rss_kb_end": rss_end,
        "faults": plan, "server_counters": info.get("engine", {}), "rss_kb": soak.rss,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="a short run: one kill, one freeze (< 2 minutes)")
    p.add_argument("--storms", type=int, default=40, help="storms in all (each: a line typed in every document)")
    p.add_argument("--docs", type=int, default=3, help="documents typed into at once")
    p.add_argument("--cps", type=float, default=30.0, help="keys per second per document in a storm")
    p.add_argument("--model", help="model directory (default: $LLADA_MODEL or the embedded model)")
    p.add_argument("--server-script", help=argparse.SUPPRESS)  # an instrumented server
    p.add_argument("--faults", default=None, help=argparse.SUPPRESS)  # e.g. "" for none
    args = p.parse_args(argv)
    if args.quick:
        args.storms, args.docs = min(args.storms, 12), min(args.docs, 2)
    with tempfile.TemporaryDirectory(prefix="llada-soak-") as tmp:
        run_dir = Path(tmp) / "run"
        try:
            res = asyncio.run(run(args, run_dir))
        finally:
            runtime.stop_daemon(run_dir)
    keys = ("max_inflight_per_doc", "mem_growth", "p95_first_ms_start", "p95_first_ms_end", "errors", "lost",
            "stale", "recovery_s_killed", "recovery_s_frozen")
    print(f"{'metric':<24}{'value':>12}")
    for key in (*keys, "requests", "answered_items", "storms", "docs", "rss_kb_warm", "rss_kb_end"):
        print(f"{key:<24}{res[key]!s:>12}")
    print("faults:", " ".join(res["faults"]), "| server engine counters:", json.dumps(res["server_counters"]))
    print("server RSS (MB) after each storm:", " ".join(f"{kb / 1024:.1f}" for kb in res["rss_kb"]))
    print("(times: this machine's CPU, shared; a loaded machine inflates them)")
    print(json.dumps({k: res[k] for k in keys}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
