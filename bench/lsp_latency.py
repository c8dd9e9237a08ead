"""Editor latency benchmark: a real LSP client types a real file into llada-lsp.

The client (pygls, over stdio) opens a file with its longest function body removed, then
types the body back character by character at human speed (~10 chars/s, `--cps`), sending
a didChange and an inline completion request per keystroke, both written at once as an
editor does (older requests are not cancelled by the client: the server's newest-wins rule
does it).

Reports keystroke -> first suggestion and -> final refinement (p50/p95), the first suggestion
of the answers the engine drafted alone (`engine_first_ms_*`: no cache or type-through); the server's
overhead `overhead_ms_p50` (from `llada/stats`: the request's arrival in the server to its
answer, minus the time inside the engine); `e2e_overhead_ms_p50` (keystroke to answer as
the client saw it minus the engine's part: the server's overhead plus the transport and
the client's own parsing); the suggestion cache hit rate (cache + type-through answers
among answered requests); the share of prompt tokens reused from the engine's prompt
cache; and the server's counters and reasons for empty answers. Ends with one JSON line.

    python bench/lsp_latency.py [--quick] [--runs N] [--file F] [--cps 10] [--model DIR] [--mode speedy|quality]
                                [--alternatives N] [--rescue N] [--profile OUT]
    python bench/lsp_latency.py --big-file [LINES] [--huge-mb 20] [--server-root NAME=DIR ...]
    python bench/lsp_latency.py --engine sglang fake|http://host:port [--quick]

`--runs N` types the body N times, a fresh server each, and pools the samples: percentiles over
every run's keystrokes (one run's p50 sits on a few drafts and moves by several ms between runs).

`--engine sglang URL` measures the SGLang backend instead (bench/sglang_latency.py): the
adapter's overhead per request and the time from supersession to the abort reaching the
server; URL `fake` runs the FAKE SGLang server in-process at a LLaDA2.1-mini block delay.
    python bench/lsp_latency.py --workspace-context [--quick] [--file F] [--open N]

`--workspace-context` types into one file of a package (default llada_lsp/completion/completions.py)
while N other files of the same folder are open (those it imports first; the folder is the
workspace root, so it is indexed too), twice in one run: with the server's workspace context
off, then on. It reports the prompt reuse of each (the share of prompt tokens the engine
restored from its prompt cache), the engine answers that reused nothing, the first-suggestion
latency, and how often the context was built, as a table and one JSON line.

`--big-file` measures the server's own time per keystroke on a generated file of LINES
lines (default 50,000), with no engine (see bench/keystroke_cost.py): p50/p95 per row,
for this checkout and each `--server-root` (e.g. `old=/tmp/old` after `git worktree add
/tmp/old HEAD`), then one JSON line.

`--profile OUT` runs the server under cProfile (its event-loop thread; the engine thread is
not profiled): `python -c "import pstats; pstats.Stats('OUT').sort_stats('cumtime')
.print_stats('llada_lsp|pygls', 30)"`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from lsprotocol import types as t

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from llada_lsp import client as lc  # noqa: E402 - after the path fix, for `python bench/lsp_latency.py`

DEFAULT_FILE = ROOT / "tests/llada_lsp/data/shapes.py.txt"
BIG_PREFILL = 64  # prompt tokens prefilled by one answer: more than typing explains (a cache miss)
PACKAGE_FILE = ROOT / "llada_lsp/completion/completions.py"  # --workspace-context types into it


def siblings(path: Path, n: int) -> list[Path]:
    """Up to `n` other files of `path`'s folder with its extension: those it imports first
    (in import order), then the rest by name."""
    others = sorted(p for p in path.parent.glob(f"*{path.suffix}") if p != path)
    text = path.read_text()
    imported = sorted((p for p in others if f".{p.stem} import" in text or f"import {p.stem}" in text),
                      key=lambda p: min(i for i in (text.find(f".{p.stem} import"), text.find(f"import {p.stem}"))
                                        if i >= 0))
    return (imported + [p for p in others if p not in imported])[:n]


def pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def pick_body(text: str) -> tuple[int, str]:
    """(offset, body): the longest function body of the file, to be typed back."""
    lines = text.split("\n")
    best = (0, "")
    for i, line in enumerate(lines):
        if line.lstrip().startswith(("def ", "fn ", "func ", "function ")) and \
                line.rstrip().endswith((":", "{")):
            ind = len(line) - len(line.lstrip())
            j = i + 1
            while j < len(lines) and (not lines[j].strip() or
                                      len(lines[j]) - len(lines[j].lstrip()) > ind):
                j += 1
            body = "\n".join(lines[i + 1: j]).rstrip()
            if len(body) > len(best[1]):
                start = sum(len(x) + 1 for x in lines[: i + 1])
                best = (start, body)
    return best


async def run(args: argparse.Namespace) -> dict[str, Any]:
    path = Path(args.file).resolve()
    full = path.read_text()
    start, whole = pick_body(full)
    body = whole[: min(len(whole), 60 if args.quick else args.chars)]
    text = full[:start] + full[start + len(whole):]  # the whole body goes; its start is typed
    uri = path.as_uri()
    client = lc.LladaClient("llada-bench")
    init: dict[str, Any] = {"mode": args.mode, "workspaceContext": bool(args.context_on)}
    if args.alternatives:
        init["alternatives"] = args.alternatives
    if args.rescue is not None:
        init["rescueAlternatives"] = args.rescue
    if args.model:
        init["model"] = args.model
    prof = ["-m", "cProfile", "-o", args.profile] if args.profile else []
    root = path.parent.as_uri() if args.workspace_context else None
    await client.start(init, lc.server_command(args.server_script, *prof), caps=t.ClientCapabilities(), root_uri=root)
    name = path.name.removesuffix(".txt")
    lid = {".py": "python", ".ts": "typescript", ".go": "go", ".rs": "rust"}.get(
        name[name.rfind("."):], "plaintext")
    for other in siblings(path, args.open) if args.workspace_context else []:
        lc.open_document(client, other.as_uri(), lid, other.read_text())
    lc.open_document(client, uri, lid, text)
    timeline: list[Any] = []
    rows: list[dict[str, Any]] = []
    tasks = []
    line = full[:start].count("\n")
    col = 0

    async def request(version: int, sent: asyncio.Future[Any], t_key: float) -> None:
        res = await sent
        t_first = time.perf_counter()
        cid = lc.completion_id(res)
        rows.append({"version": version, "t_key": t_key, "t_first": t_first, "cid": cid})
        if args.dump:
            timeline.append((t_key, t_first, cid))

    t_begin = time.perf_counter()
    for k, ch in enumerate(body):
        version = k + 2
        t_key = time.perf_counter()
        # written at once, as an editor does on a keystroke (the answer is awaited in a task)
        pos, sent = lc.keystroke(client, uri, version, line, col, ch)
        line, col = pos.line, pos.character
        tasks.append(asyncio.ensure_future(request(version, sent, t_key)))
        await asyncio.sleep(max(0.0, t_begin + (k + 1) / args.cps - time.perf_counter()))  # typing pace
    await asyncio.wait_for(asyncio.gather(*tasks), 120)
    answered = [r for r in rows if r["cid"]]
    try:
        await client.until(lambda: all(client.stats_of(r["cid"]) for r in answered), 60)
    except TimeoutError:
        pass  # reported as fewer stats
    server_info = await lc.debug_info(client)
    await client.close()
    stats = {s["completionId"]: s for s in client.stats}
    final_at = {n.params["completionId"]: n.at for n in client.notes
                if n.method == "llada/refine" and n.params["final"]}

    if args.dump:
        Path(args.dump).write_text(json.dumps({"timeline": timeline, "stats": stats}))
    first = [(r["t_first"] - r["t_key"]) * 1000 for r in answered]
    # the answers the engine drafted (not the cache's nor type-through's)
    first_engine = [(r["t_first"] - r["t_key"]) * 1000 for r in answered
                    if r["cid"] in stats and stats[r["cid"]]["source"] == "engine"]
    final = [(final_at[r["cid"]] - r["t_key"]) * 1000 for r in answered
             if r["cid"] in final_at]
    st = [stats[r["cid"]] for r in answered if r["cid"] in stats]
    overhead = [s["overheadMs"] for s in st if s["source"] == "engine"]
    # keystroke -> answer as the client saw it, minus the engine's part of it: the server's
    # overhead plus the transport (didChange, JSON, pipes) and the client's parsing
    e2e = [(r["t_first"] - r["t_key"]) * 1000 - (stats[r["cid"]]["firstMs"]
                                                 - stats[r["cid"]]["overheadMs"])
           for r in answered if r["cid"] in stats and stats[r["cid"]]["source"] == "engine"]
    hits = sum(1 for s in st if s["cacheHit"])
    ctx = server_info.get("workspaceContext", {})
    reused = sum(s["reusedTokens"] for s in st)
    prefill = sum(s["prefillTokens"] for s in st)
    return {
        "first_ms_p50": round(pct(first, 0.5), 1), "first_ms_p95": round(pct(first, 0.95), 1),
        "final_ms_p50": round(pct(final, 0.5), 1),
        "engine_first_ms_p50": round(pct(first_engine, 0.5), 1),
        "engine_first_ms_p95": round(pct(first_engine, 0.95), 1),
        "overhead_ms_p50": round(statistics.median(overhead), 2) if overhead else None,
        "e2e_overhead_ms_p50": round(statistics.median(e2e), 2) if e2e else None,
        "engine_answers": len(overhead),
        "cache_hit_rate": round(hits / max(1, len(st)), 3),
        "prompt_reuse": round(reused / max(1, reused + prefill), 3),
        "requests": len(rows), "answered": len(answered), "keystrokes": len(body),
        "big_prefills": sum(1 for s in st if s["source"] == "engine" and s["prefillTokens"] >= BIG_PREFILL),
        "context_builds": ctx.get("builds", 0), "context_paths": ctx.get("paths", []),
        "context_tokens": ctx.get("tokens", 0),
        "file": path.name, "server_counters": server_info.get("counters", {}),
        "empty_reasons": {r["reason"]: r["count"] for r in server_info.get("emptyReasons", [])},
        "samples": {"first": first, "first_engine": first_engine, "final": final, "overhead": overhead, "e2e": e2e},
    }


def pooled(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The runs of `--runs N` as one: percentiles over every run's samples, counts summed, the
    reuse and hit rates weighted by their runs' answers (one run: itself)."""
    if len(runs) == 1:
        return runs[0]
    cat = {k: [x for r in runs for x in r["samples"][k]] for k in runs[0]["samples"]}
    out = dict(runs[-1])
    answers = [max(1, r["answered"]) for r in runs]
    out.update({
        "first_ms_p50": round(pct(cat["first"], 0.5), 1), "first_ms_p95": round(pct(cat["first"], 0.95), 1),
        "final_ms_p50": round(pct(cat["final"], 0.5), 1),
        "engine_first_ms_p50": round(pct(cat["first_engine"], 0.5), 1),
        "engine_first_ms_p95": round(pct(cat["first_engine"], 0.95), 1),
        "overhead_ms_p50": round(statistics.median(cat["overhead"]), 2) if cat["overhead"] else None,
        "e2e_overhead_ms_p50": round(statistics.median(cat["e2e"]), 2) if cat["e2e"] else None,
        "cache_hit_rate": round(sum(r["cache_hit_rate"] * a for r, a in zip(runs, answers, strict=True)) / sum(answers), 3),
        "prompt_reuse": round(sum(r["prompt_reuse"] * a for r, a in zip(runs, answers, strict=True)) / sum(answers), 3),
        "runs_first_ms_p50": [r["first_ms_p50"] for r in runs], "samples": cat,
    })
    for k in ("requests", "answered", "engine_answers", "keystrokes", "big_prefills"):
        out[k] = sum(r[k] for r in runs)
    for k in ("server_counters", "empty_reasons"):
        out[k] = dict(sum((Counter(r[k]) for r in runs), Counter()))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="type 60 characters (< 2 minutes)")
    p.add_argument("--file", default=None, help=f"default {DEFAULT_FILE.relative_to(ROOT)} "
                   f"({PACKAGE_FILE.relative_to(ROOT)} with --workspace-context)")
    p.add_argument("--workspace-context", action="store_true",
                   help="type with other files of the package open: workspace context off, then on")
    p.add_argument("--open", type=int, default=4, help="with --workspace-context: other files open")
    p.add_argument("--chars", type=int, default=300, help="characters to type (full run)")
    p.add_argument("--cps", type=float, default=10.0, help="typing speed, characters/second")
    p.add_argument("--runs", type=int, default=1,
                   help="type the body this many times, a fresh server each, and pool the samples")
    p.add_argument("--model", help="model directory (default: $LLADA_MODEL or embedded)")
    p.add_argument("--mode", default="speedy", choices=["speedy", "quality"])
    p.add_argument("--alternatives", type=int, default=0,
                   help="candidates from the most likely first tokens (0: the mode's default)")
    p.add_argument("--rescue", type=int, default=None,
                   help="the server's rescueAlternatives (default: the server's, 4; 0: off)")
    p.add_argument("--server-script", help=argparse.SUPPRESS)
    p.add_argument("--dump", help=argparse.SUPPRESS)  # instrumented servers
    p.add_argument("--profile", metavar="PATH",
                   help="run the server under cProfile (its event-loop thread) into PATH")
    p.add_argument("--big-file", type=int, nargs="?", const=50_000, metavar="LINES",
                   help="server time per keystroke on a generated file of LINES lines")
    p.add_argument("--huge-mb", type=int, default=20,
                   help="with --big-file: also type into a document of this many MB (0: no)")
    p.add_argument("--server-root", action="append", default=[], metavar="NAME=DIR",
                   help="with --big-file: also measure the server of another checkout")
    p.add_argument("--engine", nargs=2, metavar=("sglang", "URL"),
                   help="measure the SGLang backend at URL ('fake': the fake server in-process)")
    args = p.parse_args(argv)
    if args.engine:
        if args.engine[0] != "sglang":
            p.error("--engine takes 'sglang URL'")
        from bench.sglang_latency import main as sglang_main

        return sglang_main(args.engine[1], args.quick)
    if args.big_file:
        return big_file(args)
    if args.workspace_context:
        return context_on_off(args)
    args.file = args.file or str(DEFAULT_FILE)
    args.context_on = True
    res = pooled([asyncio.run(run(args)) for _ in range(max(1, args.runs))])
    print(f"{'metric':<22}{'value':>12}")
    for k in ("first_ms_p50", "first_ms_p95", "final_ms_p50", "engine_first_ms_p50", "engine_first_ms_p95",
              "overhead_ms_p50", "e2e_overhead_ms_p50", "cache_hit_rate", "prompt_reuse", "requests", "answered",
              "engine_answers", "keystrokes"):
        print(f"{k:<22}{res[k]!s:>12}")
    print("server counters:", json.dumps(res["server_counters"], sort_keys=True))
    print("no suggestion because:", json.dumps(res["empty_reasons"], sort_keys=True))
    if args.runs > 1:
        print(f"pooled over {args.runs} runs; each run's first_ms_p50: {res['runs_first_ms_p50']}")
    print("(absolute times: this machine's CPU; a loaded machine inflates them)")
    keys = ("first_ms_p50", "first_ms_p95", "final_ms_p50", "engine_first_ms_p50", "engine_first_ms_p95",
            "overhead_ms_p50", "e2e_overhead_ms_p50", "cache_hit_rate", "prompt_reuse", "requests", "answered",
            "engine_answers")
    print(json.dumps({k: res[k] for k in keys} | ({"runs": args.runs, "runs_first_ms_p50": res["runs_first_ms_p50"]}
                                                  if args.runs > 1 else {})))
    return 0


def context_on_off(args: argparse.Namespace) -> int:
    """--workspace-context: the same typing with the server's workspace context off, then on."""
    args.file = args.file or str(PACKAGE_FILE)
    res = {}
    for on in (False, True):
        args.context_on = on
        res[on] = asyncio.run(run(args))
    print(f"typing {res[True]['keystrokes']} characters into {res[True]['file']} with "
          f"{args.open} other files of its folder open")
    print(f"{'context':<9}{'prompt_reuse':>13}{'big_prefills':>14}{'engine_answers':>15}"
          f"{'first_ms_p50':>13}{'builds':>8}{'ctx_tokens':>11}")
    for on in (False, True):
        r = res[on]
        print(f"{'on' if on else 'off':<9}{r['prompt_reuse']:>13.3f}{r['big_prefills']:>14}{r['engine_answers']:>15}"
              f"{r['first_ms_p50']:>13}{r['context_builds']:>8}{r['context_tokens']:>11}")
    print("context chunks (last request):", ", ".join(res[True]["context_paths"]) or "none")
    print("(prompt_reuse: prompt tokens restored from the engine's prompt cache / all prompt tokens, "
          f"engine answers; big_prefills: engine answers that prefilled {BIG_PREFILL}+ tokens; builds: times the "
          "context was chosen again)")
    print(json.dumps({"prompt_reuse_off": res[False]["prompt_reuse"], "prompt_reuse_on": res[True]["prompt_reuse"],
                      "big_prefills_off": res[False]["big_prefills"], "big_prefills_on": res[True]["big_prefills"],
                      "engine_answers_off": res[False]["engine_answers"], "engine_answers_on": res[True]["engine_answers"],
                      "first_ms_p50_off": res[False]["first_ms_p50"], "first_ms_p50_on": res[True]["first_ms_p50"],
                      "context_builds": res[True]["context_builds"], "context_tokens": res[True]["context_tokens"],
                      "context_paths": res[True]["context_paths"], "keystrokes": res[True]["keystrokes"],
                      "file": res[True]["file"]}))
    return 0


def big_file(args: argparse.Namespace) -> int:
    sys.path.insert(0, str(ROOT))
    from bench.keystroke_cost import run as keystrokes

    roots = {"new": ROOT, **{n: Path(d) for n, d in (r.split("=", 1) for r in args.server_root)}}
    res = keystrokes(args.big_file, args.huge_mb, roots)
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
