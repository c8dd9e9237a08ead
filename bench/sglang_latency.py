"""The SGLang backend's own cost: `python bench/lsp_latency.py --engine sglang URL [--quick]`.

Drives `llada_lsp.engines.sglang_engine.SglangEngineClient` (the adapter the language server uses)
with completions cut from a real file, one at a time, and reports:

- overhead per request (p50, p95): the adapter's wall time from `submit` to its done event
  minus the server's own time for the request (from the request's arrival in the server to
  its last chunk, the FAKE server's timestamps, same clock, same process). What remains is
  our code: prompt layout and tokenizing, connecting, writing the request, reading and
  parsing the chunks, decoding the answer, the stop rules; plus the fake's HTTP parsing
  before it stamps the arrival (counted against us). Goal: p50 <= 2 ms.
- abort latency (p50, p95): from a superseding `submit` (same document, the older request
  streaming) to the older request's `/abort_request` arriving at the server. Goal: p50 <= 5 ms.
- slot release before the first chunk (p50, p95): a request superseded right after it reached
  the server, before its first chunk, from the superseding `submit` to its row's end in the
  server. SGLang forwards one abort per rid and an abort that precedes its request is lost,
  so the client aborts once the first chunk shows the server holds the rid (at most 1 s
  later): this is what that wait costs in running-slot time. Reported, no goal.

URL `fake` starts the FAKE SGLang server (tests.fakes.sglang) in this process with a per-block
delay of 20 ms, a LLaDA2.1-mini block on an H100: the LLaDA2.1 report gives mini a peak of
~1,587 tokens/s in its Speedy mode (about 5-6 tokens a forward at ~3.5 ms a forward), so a
32-token block takes ~32 / 1,587 s = ~20 ms. Prefill is one 32-token prompt block a round, one
forward each (~3.5 ms), and pauses decoding meanwhile, as SGLang 0.5.23 schedules it (the fake
has no radix cache: every request prefills its whole prompt, a worst case). The overhead does not depend on the delay (it is
subtracted); the delay only sets how long aborted requests stream. Another URL is a real
server: only wall times are reported (its arrival times are not observable from here).
Ends with one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

from engine.api import CompletionRequest, Plan
from llada_lsp.engines.sglang_engine import SglangEngineClient
from llada_lsp.engines.sglang_servers import SglangConfig
from tests.fakes.checkpoint import END_OF_MIDDLE, llada2_dir
from tests.fakes.sglang import Codec, FakeSglang

ROOT = Path(__file__).resolve().parents[1]
FILE = ROOT / "tests/llada_lsp/data/shapes.py.txt"
BLOCK_DELAY_MS = 20.0  # LLaDA2.1-mini on an H100, one 32-token block (module docstring)
PREFILL_DELAY_MS = 3.5  # one forward over one 32-token prompt block (module docstring)
REPLY = "self.width * self.height\n"


def pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def cursors(text: str, n: int) -> list[tuple[str, str]]:
    """`n` (prefix, suffix) splits at line ends spread over the file (again from the top when
    the file has fewer lines)."""
    ends = [i for i, c in enumerate(text) if c == "\n"][5:]
    step = max(1, len(ends) // n)
    splits = [(text[: ends[i] + 1], text[ends[i] + 1:]) for i in range(0, len(ends), step)]
    return [splits[i % len(splits)] for i in range(n)]


async def overheads(eng: SglangEngineClient, fake: FakeSglang | None, splits: list[tuple[str, str]]
                    ) -> tuple[list[float], list[float]]:
    over, wall = [], []
    for i, (pre, suf) in enumerate(splits):
        t0 = time.perf_counter()
        job = eng.submit(CompletionRequest(f"o{i}", f"file:///o{i}.py", pre, suf, Plan(max_tokens=48, stop="line")))
        async for ev, t_ev in job.events():
            if ev.kind == "error":
                raise RuntimeError(ev.error)
            if ev.kind == "done":
                wall.append((t_ev - t0) * 1000)
        if fake is not None:
            tm = fake.timings[fake.received_rids[-1]]
            assert tm.last_chunk is not None
            over.append(wall[-1] - (tm.last_chunk - tm.arrival) * 1000)
    return over, wall


def more_aborts(fake: FakeSglang, seen: int) -> bool:
    return len(fake.abort_log) > seen


async def aborts(eng: SglangEngineClient, fake: FakeSglang, splits: list[tuple[str, str]]) -> list[float]:
    out = []
    for i, (pre, suf) in enumerate(splits):
        doc = f"file:///a{i}.py"
        old = eng.submit(CompletionRequest(f"a{i}", doc, pre, suf, Plan(max_tokens=256)))
        async for ev, _ in old.events():
            if ev.kind == "draft":
                break  # streaming now
        seen = len(fake.abort_log)
        t0 = time.perf_counter()
        new = eng.submit(CompletionRequest(f"b{i}", doc, pre, suf, Plan(max_tokens=8)))
        await fake.wait_for(partial(more_aborts, fake, seen), timeout=5.0)
        out.append((fake.abort_log[seen].t - t0) * 1000)
        async for _ev, _ in new.events():
            pass
    return out


def received_more(fake: FakeSglang, n: int) -> bool:
    return len(fake.received_rids) > n


def row_ended(fake: FakeSglang, rid: str) -> bool:
    return fake.timings[rid].finished is not None


async def early_releases(eng: SglangEngineClient, fake: FakeSglang, splits: list[tuple[str, str]]) -> list[float]:
    out = []
    for i, (pre, suf) in enumerate(splits):
        doc = f"file:///e{i}.py"
        n = len(fake.received_rids)
        old = eng.submit(CompletionRequest(f"e{i}", doc, pre, suf, Plan(max_tokens=256)))
        await fake.wait_for(partial(received_more, fake, n), timeout=5.0)
        rid = fake.received_rids[n]
        t0 = time.perf_counter()
        new = eng.submit(CompletionRequest(f"f{i}", doc, pre, suf, Plan(max_tokens=8)))
        await fake.wait_for(partial(row_ended, fake, rid), timeout=5.0)
        out.append((fake.timings[rid].finished or t0) * 1000 - t0 * 1000)
        async for _ev, _ in old.events():
            pass
        async for _ev, _ in new.events():
            pass
    return out


async def run(url: str, quick: bool, block_delay_ms: float) -> dict[str, Any]:
    n_req, n_abort = (30, 15) if quick else (300, 100)
    splits = cursors(FILE.read_text(), n_req)
    with tempfile.TemporaryDirectory() as tmp:
        tok = llada2_dir(Path(tmp) / "llada2")
        fake = None
        if url == "fake":
            codec = Codec(tok)
            short, long = codec.encode(REPLY) + [END_OF_MIDDLE], codec.encode(REPLY * 40)

            def reply(_prompt: list[int], sp: dict[str, Any]) -> list[int]:
                return long if sp["max_new_tokens"] > 64 else short  # aborted ones stream long

            fake = FakeSglang(generator=reply, tokenizer=tok, end_token_id=END_OF_MIDDLE,
                              block_delay_ms=block_delay_ms, prefill_delay_ms=PREFILL_DELAY_MS, block_size=32,
                              max_running_requests=16)
            url = await fake.start()
        eng = SglangEngineClient(SglangConfig(urls={"speedy": [url]}, model=str(tok)))
        try:
            await eng.start(lambda m, p: None)
            if not eng.ready:
                raise RuntimeError(eng.error)
            await overheads(eng, fake, splits[:3])  # warm up (imports, first connections)
            over, wall = await overheads(eng, fake, splits)
            abort_ms = await aborts(eng, fake, splits[:n_abort]) if fake is not None else []
            early_ms = await early_releases(eng, fake, splits[:n_abort]) if fake is not None else []
        finally:
            await eng.close()
            if fake is not None:
                await fake.stop()
    r = lambda v: round(v, 3)  # noqa: E731
    return {"bench": "lsp_latency_sglang", "server": "fake" if fake is not None else url,
            "block_delay_ms": block_delay_ms if fake is not None else None, "requests": len(wall),
            "overhead_ms_p50": r(pct(over, 0.5)) if over else None, "overhead_ms_p95": r(pct(over, 0.95)) if over else None,
            "abort_ms_p50": r(pct(abort_ms, 0.5)) if abort_ms else None,
            "abort_ms_p95": r(pct(abort_ms, 0.95)) if abort_ms else None, "aborts": len(abort_ms),
            "prefill_delay_ms": PREFILL_DELAY_MS if fake is not None else None,
            "early_release_ms_p50": r(pct(early_ms, 0.5)) if early_ms else None,
            "early_release_ms_p95": r(pct(early_ms, 0.95)) if early_ms else None,
            "wall_ms_p50": r(statistics.median(wall)), "goal_overhead_ms": 2.0, "goal_abort_ms": 5.0,
            "ok": bool(over and abort_ms and pct(over, 0.5) <= 2.0 and pct(abort_ms, 0.5) <= 5.0)}


def main(url: str, quick: bool, block_delay_ms: float = BLOCK_DELAY_MS) -> int:
    res = asyncio.run(run(url, quick, block_delay_ms))
    print(f"{'metric':<22}{'p50 ms':>10}{'p95 ms':>10}{'goal':>8}")
    print(f"{'adapter overhead':<22}{res['overhead_ms_p50']!s:>10}{res['overhead_ms_p95']!s:>10}{'<= 2':>8}")
    print(f"{'supersession->abort':<22}{res['abort_ms_p50']!s:>10}{res['abort_ms_p95']!s:>10}{'<= 5':>8}")
    print(f"{'slot release, early':<22}{res['early_release_ms_p50']!s:>10}{res['early_release_ms_p95']!s:>10}{'':>8}")
    print(f"{'request wall time':<22}{res['wall_ms_p50']!s:>10}{'':>10}{'':>8}")
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("url", help="'fake' or http://host:port")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--block-delay-ms", type=float, default=BLOCK_DELAY_MS)
    a = ap.parse_args()
    raise SystemExit(main(a.url, a.quick, a.block_delay_ms))
