"""The SGLang client's SSE reader on hostile and heavy streams: `python bench/sse_parse.py [--mb N]`.

A loopback server (asyncio, this process) streams chunked SSE to `llada_lsp.engines.http_client`'s
`Response.sse()`. Arms, each N MB (default 100):
- `one line`: one `data:` line that never ends (issue 41: 9.8 CPU-seconds and +66 MB RSS at
  100 MB before the reader was bounded). The reader must refuse it at MAX_LINE_BYTES.
- `events`: N MB of ordinary 1 KB events, all read (the linear cost of a heavy stream).
Baseline in the same run: `naive`, the reader as it was (a bytes buffer grown by `+=` and
cut after each line, scanned from its start), on the same streams, capped at 16 MB for the
one-line arm (it is quadratic). Reported: CPU seconds of this process, bytes the server
wrote, peak RSS growth (ru_maxrss, so only an arm that raises the peak shows). Final JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from llada_lsp.engines import http_client as http  # noqa: E402

PIECE = 64 * 1024


async def naive_sse(resp: http.Response) -> AsyncIterator[str]:
    """The reader before issue 41 (the baseline)."""
    buf = b""
    data: list[str] = []
    async for piece in resp.chunks():
        buf += piece
        while (nl := buf.find(b"\n")) >= 0:
            line, buf = buf[:nl].rstrip(b"\r").decode("utf-8", "replace"), buf[nl + 1:]
            if not line:
                if data:
                    yield "\n".join(data)
                    data = []
            elif line.startswith("data:"):
                data.append(line[5:].removeprefix(" "))


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def arm(kind: str, total: int, reader: Callable[[http.Response], AsyncIterator[str]]) -> dict[str, Any]:
    sent = 0

    async def serve(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        nonlocal sent
        await r.readuntil(b"\r\n\r\n")
        w.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
        body = b"data: " + b"7" * (PIECE - 6) if kind == "one line" else (b"data: " + b"x" * 1016 + b"\n\n") * 64
        try:
            while sent < total:
                w.write(f"{len(body):x}\r\n".encode() + body + b"\r\n")
                await w.drain()
                sent += len(body)
            w.write(b"0\r\n\r\n")
            await w.drain()
        except ConnectionError:
            pass
        finally:
            w.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    rss0, cpu0 = rss_mb(), time.process_time()
    events, error = 0, None
    try:
        resp = await http.request(f"http://127.0.0.1:{port}", "POST", "/generate", {}, read_timeout=60)
        async for _ in reader(resp):
            events += 1
        resp.close()
    except http.HttpError as e:
        error = str(e).split(": ", 1)[-1][:60]
    cpu = time.process_time() - cpu0
    server.close()
    return {"arm": kind, "mb": round(total / 2**20), "cpu_s": round(cpu, 3), "written_mb": round(sent / 2**20, 1),
            "events": events, "rss_growth_mb": round(rss_mb() - rss0, 1), "refused": error}


async def run(mb: int) -> dict[str, Any]:
    total = mb * 2**20
    rows = [await arm("one line", total, lambda r: r.sse()), await arm("events", total, lambda r: r.sse())]
    base = [await arm("one line", min(total, 16 * 2**20), naive_sse), await arm("events", total, naive_sse)]
    for b in base:
        b["arm"] = "naive " + b["arm"]
    return {"bench": "sse_parse", "max_line_bytes": http.MAX_LINE_BYTES, "rows": rows + base,
            "ok": rows[0]["refused"] is not None and rows[0]["written_mb"] < http.MAX_LINE_BYTES / 2**20 + 16
            and rows[1]["events"] == total // 1024}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=int, default=100)
    res = asyncio.run(run(ap.parse_args().mb))
    print(f"{'arm':<16}{'MB':>6}{'CPU s':>8}{'written MB':>12}{'events':>9}{'RSS +MB':>9}  refused")
    for r in res["rows"]:
        print(f"{r['arm']:<16}{r['mb']:>6}{r['cpu_s']:>8}{r['written_mb']:>12}{r['events']:>9}{r['rss_growth_mb']:>9}  {r['refused'] or ''}")
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
