"""Next-edit under load: does one big `llada/nextEdit` request stall the server? (issue 49 §3)

    python bench/next_edit_load.py [--scale 1.0] [--status-every-ms 10] [--timeout 60]
                                   [--python PY] [--cases params,rename,deep,answer,complete] [--profile OUT]
                                   [--hogs K]

The real server over stdio (this checkout's, or the one `--python` runs as `-m llada_lsp`
from the temporary directory, e.g. another checkout's venv Python for its server), its default engine, next-edit on, fills off
(the gated default). Per case a fresh document is opened and edited, then a `llada/nextEdit`
request is sent and, until it is answered, a `llada/debugInfo` request (the status) every
`--status-every-ms`; each status answer's latency is the client's (send to answer). Cases, at
`--scale` 1 (a smaller scale shrinks the counts; the bench's smoke test runs the smallest):
- `params`: a parameter added to a function called 100,000 times (about 500 KB);
- `rename`: a module-level name used 100,000 times renamed at its binding;
- `deep`: a one-site rename in a 40 KB file whose one use lies under 20,000 nested parentheses;
- `answer`: a parameter added to a function called 1,000 times among 99,000 other calls (the
  same 500 KB, under the site limit: an answer with its suggestions);
- `complete`: the same file and edit, then a `textDocument/inlineCompletion` (automatic) at
  the end of the edited function's body instead of the next-edit request: the completion
  path's parses and checks of a 500 KB file (its engine's decode included; the engine is
  warmed first by a completion in a small document, so that the model's first decode is not
  counted).
`--hogs K`: K CPU-hog processes (`bench.busy`'s: local, bounded, each stops by itself
`HOG_LIMIT_S` past the run's `--timeout` budget, and the bench ends them by pid) spin from before
the idle baseline to the end, the machine as loaded as a user's busy one.
The baseline in the same run: status requests with no next-edit running (`idle`). Reports
per case the next-edit's answer time (and over one tree-sitter parse of the same text in the
bench's process, the floor of any answer that reads the tree), its reason or suggestion count,
and the status latency p50/p99/max (and p99 over the idle p99); then one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.busy import HOG_LIMIT_S, start_hogs, stop_hogs  # noqa: E402 - after the path fix
from llada_lsp import client as lc  # noqa: E402 - after the path fix, for `python bench/next_edit_load.py`

CASES = ("params", "rename", "deep", "answer", "complete")


def case(name: str, scale: float) -> tuple[str, tuple[int, int, int, int, str], tuple[int, int]]:
    """(text, the edit: (line, from, to character, ..., new text), the request's position)."""
    n = max(10, int(100_000 * scale))
    if name == "params":
        text = "def f(a):\n    return a\n\n\n" + "".join(f"f({i % 10})\n" for i in range(n))
        return text, (0, 7, 0, 7, ", b"), (0, 10)
    if name == "rename":
        text = "v = 0\n\n\ndef f(x):\n    return x\n\n\n" + "f(v)\n" * n
        return text, (0, 0, 0, 1, "w"), (0, 1)
    if name == "deep":
        d = max(10, int(20_000 * scale))
        text = "def g(x):\n    return x\n\n\ny = " + "(" * d + "g(1)" + ")" * d + "\n"
        return text, (0, 4, 0, 5, "h"), (0, 5)
    k = max(1, min(n // 100, 999))  # answer, complete: f called once per 100 lines, 999 times at most (+ its def: 1,000)
    text = "def f(a):\n    return a\n\n\ndef g(a):\n    return a\n\n\n" + "".join(
        f"{'f' if i % 100 == 0 and i // 100 < k else 'g'}({i % 10})\n" for i in range(n))
    return text, (0, 7, 0, 7, ", b"), (0, 10)


def pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def parse_ms(text: str, change: tuple[int, int, int, int, str]) -> float:
    """The baseline in the same run: one tree-sitter parse of the edited text, in this process."""
    from llada_lsp.text.syntax import parser_for
    l1, c1, l2, c2, new = change
    lines = text.split("\n")
    lines[l1] = lines[l1][:c1] + new + lines[l2][c2:]
    data = "\n".join(lines).encode()
    parser = parser_for("python")
    assert parser is not None
    t0 = time.perf_counter()
    parser.parse(data)
    return (time.perf_counter() - t0) * 1000


class Wire:
    """A bare JSON-RPC client over the server's stdio: `json.loads` and nothing else on the
    client's side (pygls' client builds a namedtuple class per object it reads, which takes
    seconds for 1,000 suggestions and would be counted as the server's latency)."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc, self.ids = proc, 0
        self.waiting: dict[int, asyncio.Future[Any]] = {}
        self.ready = asyncio.get_running_loop().create_future()
        self.reader = asyncio.ensure_future(self._read())

    @classmethod
    async def start(cls, command: list[str]) -> Wire:
        proc = await asyncio.create_subprocess_exec(*command, stdin=asyncio.subprocess.PIPE, cwd=tempfile.gettempdir(),
                                                    stdout=asyncio.subprocess.PIPE, limit=1 << 26)
        return cls(proc)

    def send(self, method: str, params: Any, request: bool = True) -> asyncio.Future[Any] | None:
        msg: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": params}
        fut = None
        if request:
            self.ids += 1
            msg["id"] = self.ids
            fut = self.waiting[self.ids] = asyncio.get_running_loop().create_future()
        body = json.dumps(msg).encode()
        assert self.proc.stdin is not None
        self.proc.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        return fut

    async def request(self, method: str, params: Any) -> Any:
        fut = self.send(method, params)
        assert fut is not None
        return await fut

    async def _read(self) -> None:
        out = self.proc.stdout
        assert out is not None
        while True:
            n = 0
            while (line := await out.readline()) not in (b"\r\n", b""):
                if line.lower().startswith(b"content-length:"):
                    n = int(line.split(b":")[1])
            if not line:
                return
            msg = json.loads(await out.readexactly(n))
            if "id" in msg and "method" not in msg:
                fut = self.waiting.pop(msg["id"], None)
                if fut is not None and not fut.done():
                    fut.set_result(msg.get("result", msg.get("error")))
            elif msg.get("method") == "llada/status" and msg["params"].get("state") in ("ready", "error") \
                    and not self.ready.done():
                self.ready.set_result(msg["params"])
            elif "id" in msg:  # a request from the server (configuration, progress): answered empty
                body = json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": None}).encode()
                assert self.proc.stdin is not None
                self.proc.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)

    async def close(self) -> None:
        await asyncio.wait_for(self.request("shutdown", None), 30)
        self.send("exit", None, request=False)
        await asyncio.wait_for(self.proc.wait(), 30)
        self.reader.cancel()


async def status_while(w: Wire, pending: asyncio.Future[Any], every: float) -> list[float]:
    """Status requests every `every` s until `pending` is answered: their latencies (ms)."""
    lat: list[float] = []

    async def one() -> None:
        t0 = time.perf_counter()
        await w.request("llada/debugInfo", {})
        lat.append((time.perf_counter() - t0) * 1000)

    sent: list[asyncio.Future[None]] = []
    while True:
        sent.append(asyncio.ensure_future(one()))
        try:
            await asyncio.wait_for(asyncio.shield(pending), every)
            break
        except TimeoutError:
            continue
    await asyncio.gather(*sent)
    return lat


def _pos(line: int, ch: int) -> dict[str, int]:
    return {"line": line, "character": ch}


async def run_case(w: Wire, name: str, scale: float, every: float, timeout: float) -> dict[str, Any]:
    text, (l1, c1, l2, c2, new), (line, ch) = case(name, scale)
    uri = f"file:///tmp/llada-bench-next-edit-load/{name}.py"
    w.send("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "python", "version": 1,
                                                     "text": text}}, request=False)
    await w.request("llada/debugInfo", {})  # the open is processed
    w.send("textDocument/didChange", {"textDocument": {"uri": uri, "version": 2}, "contentChanges": [
        {"range": {"start": _pos(l1, c1), "end": _pos(l2, c2)}, "text": new}]}, request=False)
    t0 = time.perf_counter()
    if name == "complete":  # the end of `    return a`, the edited function's body
        pending = w.send("textDocument/inlineCompletion", {"textDocument": {"uri": uri}, "position": _pos(1, 12),
                                                           "context": {"triggerKind": 2}})
    else:
        pending = w.send("llada/nextEdit", {"textDocument": {"uri": uri, "version": 2},
                                            "position": _pos(line, ch)})
    assert pending is not None
    watch = asyncio.ensure_future(status_while(w, pending, every))
    row: dict[str, Any] = {"case": name, "bytes": len(text.encode())}
    try:
        ans = await asyncio.wait_for(asyncio.shield(pending), timeout)
    except TimeoutError:
        watch.cancel()
        nan = float("nan")
        return {**row, "answer_ms": nan, "answer": f"none after {timeout:.0f} s", "limit": "", "suggestions": 0,
                "status_n": 0, "status_p50_ms": nan, "status_p99_ms": nan, "status_max_ms": nan}
    ms = (time.perf_counter() - t0) * 1000
    lat = await watch
    row["parse_ms"] = round(parse_ms(text, (l1, c1, l2, c2, new)), 1)
    w.send("textDocument/didClose", {"textDocument": {"uri": uri}}, request=False)
    if name == "complete":
        if isinstance(ans, dict) and "code" in ans:
            raise RuntimeError(f"the completion failed: {ans.get('message')}")
        items = (ans or {}).get("items", []) if isinstance(ans, dict) else (ans or [])
        info = await w.request("llada/debugInfo", {})
        ans = {"kind": "completion", "suggestions": items,
               "reason": "" if items else f"no item: {info.get('lastEmptyReason', '')}"}
    return {**row, "answer_ms": round(ms, 1), "answer_over_parse": round(ms / row["parse_ms"], 2),
            "answer": ans.get("reason") or ans.get("kind", ""),
            "limit": ans.get("limit", ""), "suggestions": len(ans.get("suggestions", [])), "status_n": len(lat),
            "status_p50_ms": round(pct(lat, 0.5), 1), "status_p99_ms": round(pct(lat, 0.99), 1),
            "status_max_ms": round(max(lat), 1)}


async def warm(w: Wire) -> None:
    """One completion in a small document: the engine's first decode (its warm-up) before the cases."""
    uri = "file:///tmp/llada-bench-next-edit-load/warm.py"
    w.send("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "python", "version": 1,
                                                     "text": "def add(a, b):\n    return a + b\n\n\nx = add(\n"}},
           request=False)
    await asyncio.wait_for(w.request("textDocument/inlineCompletion", {
        "textDocument": {"uri": uri}, "position": _pos(4, 8), "context": {"triggerKind": 2}}), 600)
    w.send("textDocument/didClose", {"textDocument": {"uri": uri}}, request=False)


async def main(args: argparse.Namespace) -> dict[str, Any]:
    prof = ("-m", "cProfile", "-o", args.profile) if args.profile else ()
    command = [args.python, *prof, "-m", "llada_lsp"] if args.python else lc.server_command(None, *prof)
    cases = args.cases.split(",")
    hogs = start_hogs(args.hogs, args.timeout * len(cases) + HOG_LIMIT_S)
    try:
        return await measure(args, command, cases)
    finally:
        stop_hogs(hogs)


async def measure(args: argparse.Namespace, command: list[str], cases: list[str]) -> dict[str, Any]:
    w = await Wire.start(command)
    try:
        await w.request("initialize", {"processId": None, "rootUri": None, "capabilities": {},
                                       "initializationOptions": {"nextEdit": {"enabled": True}}})
        w.send("initialized", {}, request=False)
        status = await asyncio.wait_for(w.ready, 300)
        if status.get("state") != "ready":
            raise RuntimeError(f"the server's engine did not start: {status}")
        idle: list[float] = []
        for _ in range(50):
            t0 = time.perf_counter()
            await w.request("llada/debugInfo", {})
            idle.append((time.perf_counter() - t0) * 1000)
        if "complete" in cases:
            await warm(w)
        rows = [await run_case(w, name, args.scale, args.status_every_ms / 1000, args.timeout) for name in cases]
    finally:
        try:
            await w.close()
        except (TimeoutError, ConnectionError):
            w.proc.kill()
    idle_p99 = pct(idle, 0.99)
    for r in rows:
        r["status_p99_over_idle"] = round(r["status_p99_ms"] / idle_p99, 1) if idle_p99 > 0 else None
    return {"bench": "next_edit_load", "scale": args.scale, "status_every_ms": args.status_every_ms,
            "server": args.python or sys.executable, "hogs": args.hogs, "load_avg_1m": round(os.getloadavg()[0], 2),
            "idle_status_p50_ms": round(statistics.median(idle), 1), "idle_status_p99_ms": round(idle_p99, 1),
            "rows": rows}


def table(res: dict[str, Any]) -> str:
    head = (f"{'case':8} {'bytes':>8} {'answer ms':>10} {'/ parse':>8} {'status p50':>10} {'p99':>8} {'max':>8} "
            f"{'n':>5}  answer")
    lines = [f"idle status: p50 {res['idle_status_p50_ms']} ms, p99 {res['idle_status_p99_ms']} ms", head]
    for r in res["rows"]:
        what = f"{r['suggestions']} suggestions" if r["suggestions"] else r["answer"]
        lines.append(f"{r['case']:8} {r['bytes']:>8} {r['answer_ms']:>10} {r.get('answer_over_parse', '-'):>8} "
                     f"{r['status_p50_ms']:>10} "
                     f"{r['status_p99_ms']:>8} {r['status_max_ms']:>8} {r['status_n']:>5}  {what}"
                     + (f" [limit: {r['limit']}]" if r["limit"] else ""))
    return "\n".join(lines)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--status-every-ms", type=float, default=10.0)
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for a next-edit answer")
    ap.add_argument("--python", default="", help="the Python that runs the server (-m llada_lsp)")
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--profile", default="", help="run the server under cProfile, its stats written here")
    ap.add_argument("--hogs", type=int, default=0, help="CPU-hog processes running meanwhile (bench/busy.py's)")
    res = asyncio.run(main(ap.parse_args()))
    print(table(res))
    print(json.dumps(res))
