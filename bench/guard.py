"""The parse-error guard (issue 51): how many shown first suggestions leave a file that no
longer parses, and how many requests get nothing, with the guard off and on. Same sites,
same run.

    python bench/guard.py [--model DIR] [--per-kind 20] [--seed 0] [--threads 2]
                          [--engines model,scripted] [--cost-lines 50000] [--cost-sites 4]

Sites are cut from held-out Python files (`bench.tasks`: the stdlib files of
engine/train/heldout.txt) and the HumanEval infilling prompts (/work/shared/eval, when
present), each a file that parses, as a user meets them while typing:

- `line_end`:  a code line cut after one of its tokens, the rest of the line gone;
- `header`:    a new function: a `def` (or `class`) header cut after its name or `(`, its body
               gone (the model finishes the header: alone it leaves an empty block);
- `mid_line`:  a line cut after a call's `(`, with the `)` an editor auto-closes after it;
- `new_line`:  a blank line at a simple statement's indentation (the statement gone).

Each site is a document in the language server's own pipeline
(`llada_lsp.completion.completions.CompletionService`, no transport) and gets one automatic
request; its first item is applied as an editor applies it (over the rest of the line it
replaces). A shown suggestion *breaks* when Python's own parser (`ast.parse`, not the
guard's tree-sitter) rejects the file after it. Arms: `off` (`syntaxCheck: false`: nothing
is checked) and `on` (the guard). Engines: `model` (the in-process engine with the model:
the embedded tiny-code by default) and `scripted` (tests/fakes/scripted_engine.py answering
every request with a fixed, deliberately bad candidate list, `BAD`). Reported per engine,
arm and kind: sites, shown, broken share of shown, empty share.

The check's cost on a huge file (`cost`): the held-out files joined into one of
`--cost-lines` lines (0: skipped), `--cost-sites` sites cut from it per kind, and at each the
guard's judgement of every `BAD` candidate (`Guard.cut`, as a request asks it: the
candidate, then its cuts). Per check (one `Guard.breaks`) p50, p99
and max ms, per request (all candidates with their cuts) p50 and max ms, over the baseline in
the same run: one tree-sitter parse of the whole file. `wrong`: texts the guard passed (the
first per site) that Python's own parser rejects in the file (must be 0). Ends with one
JSON line.
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import gzip
import json
import random
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.tasks import parses  # noqa: E402
from engine.train.corpus import heldout_files, read_text  # noqa: E402
from llada_lsp.completion.completions import CompletionService  # noqa: E402
from llada_lsp.completion.line_rest import fit, rest_of_line  # noqa: E402
from llada_lsp.engines.engine_client import EngineClient, make_engine  # noqa: E402
from llada_lsp.options import parse_options  # noqa: E402
from llada_lsp.text.documents import DocumentStore  # noqa: E402
from llada_lsp.text.positions import text_position  # noqa: E402
from tests.fakes.scripted_engine import ScriptedEngine  # noqa: E402

URI = "file:///bench/guard.py"
KINDS = ("line_end", "header", "mid_line", "new_line")
HUMANEVAL = Path("/work/shared/eval/human-eval-infilling/HumanEval-SingleLineInfilling.jsonl.gz")
# the scripted engine's candidates for every request: the broken texts, one that often fits
BAD = ["raise", "):", "0", "(r'\\n', '))", "x = = 1"]
_TOKEN = re.compile(r"\w+|\S")
_HEADER = re.compile(r"^(\s*)(def|class) (\w+)")
_CALL = re.compile(r"\w\(")


@dataclass(frozen=True)
class Site:
    kind: str
    source: str
    text: str  # the document as the user has it
    offset: int  # the cursor


def ast_parses(text: str) -> bool:
    try:
        ast.parse(text)
    except (SyntaxError, ValueError):
        return False
    return True


def _lines(text: str) -> tuple[list[str], list[int]]:
    lines = text.split("\n")
    starts = [0]
    for ln in lines[:-1]:
        starts.append(starts[-1] + len(ln) + 1)
    return lines, starts


def _line_end(text: str, rng: random.Random) -> tuple[str, int] | None:
    lines, starts = _lines(text)
    rows = [i for i, ln in enumerate(lines) if len(_TOKEN.findall(ln)) >= 3 and not ln.strip().startswith(("#", '"', "'"))]
    if not rows:
        return None
    i = rng.choice(rows)
    ends = [m.end() for m in _TOKEN.finditer(lines[i])][:-1]
    cut = starts[i] + rng.choice(ends)
    return text[:cut] + text[starts[i] + len(lines[i]):], cut


def _header(text: str, rng: random.Random) -> tuple[str, int] | None:
    lines, starts = _lines(text)
    rows = [i for i, ln in enumerate(lines) if _HEADER.match(ln)]
    if not rows:
        return None
    i = rng.choice(rows)
    m = _HEADER.match(lines[i])
    assert m is not None
    indent = len(m.group(1))
    j = i + 1  # the body: the lines below indented deeper (blank ones inside it too)
    while j < len(lines) and (not lines[j].strip() or len(lines[j]) - len(lines[j].lstrip()) > indent):
        j += 1
    keep = m.end() + (1 if lines[i][m.end():].startswith("(") and rng.random() < 0.5 else 0)
    cut = starts[i] + keep
    end = starts[j] if j < len(lines) else len(text)
    return text[:cut] + "\n\n" + text[end:], cut


def _mid_line(text: str, rng: random.Random) -> tuple[str, int] | None:
    lines, starts = _lines(text)
    rows = [i for i, ln in enumerate(lines) if _CALL.search(ln) and not ln.strip().startswith(("#", '"', "'"))]
    if not rows:
        return None
    i = rng.choice(rows)
    m = rng.choice(list(_CALL.finditer(lines[i])))
    cut = starts[i] + m.end()
    return text[:cut] + ")" + text[starts[i] + len(lines[i]):], cut


def _new_line(text: str, rng: random.Random) -> tuple[str, int] | None:
    lines, starts = _lines(text)
    rows = [i for i, ln in enumerate(lines) if len(ln.strip()) >= 8 and not ln.strip().startswith(("#", '"', "'", "@"))]
    if not rows:
        return None
    i = rng.choice(rows)
    cut = starts[i] + len(lines[i]) - len(lines[i].lstrip())
    rest = text[starts[i] + len(lines[i]):]
    if not ast_parses(text[:cut] + "pass" + rest):
        return None  # a header or a line inside a bracket: its removal breaks more than the line
    return text[:cut] + rest, cut


CUTTERS: dict[str, Callable[[str, random.Random], tuple[str, int] | None]] = {
    "line_end": _line_end, "header": _header, "mid_line": _mid_line, "new_line": _new_line}


def sources(max_chars: int = 60_000) -> list[tuple[str, str]]:
    """(name, text) of the held-out files that parse, then the HumanEval solutions."""
    files = sorted((f for f in heldout_files() if f.key.startswith("stdlib/")), key=lambda f: f.key)
    out = [(f.key, t) for f in files if (t := read_text(f)) and len(t) <= max_chars and parses(t) and ast_parses(t)]
    if HUMANEVAL.exists():
        with gzip.open(HUMANEVAL, "rt") as fh:
            for line in fh:
                task = json.loads(line)
                whole = task["prompt"] + task["canonical_solution"] + task["suffix"]
                if ast_parses(whole):
                    out.append((task["task_id"], whole))
    return out


def make_sites(per_kind: int, seed: int) -> list[Site]:
    texts = sources()
    rng = random.Random(seed)
    out: list[Site] = []
    for kind in KINDS:
        got = tries = 0
        while got < per_kind and tries < per_kind * 50:
            tries += 1
            name, text = rng.choice(texts)
            cut = CUTTERS[kind](text, rng)
            if cut is not None:
                out.append(Site(kind, name, *cut))
                got += 1
    return out


async def shown_at(engine: EngineClient, site: Site, opts: dict[str, Any]) -> str | None:
    """The document after accepting the first shown item at the site, None when none is shown."""
    store = DocumentStore()
    store.open(URI, "python", 1, site.text)
    options, _ = parse_options(opts)
    svc = CompletionService(store, engine, options, lambda m, p: None, lambda: "utf-16")
    line, char = text_position(site.text, site.offset, "utf-16")
    answer = await asyncio.create_task(svc.complete(URI, line, char))
    await asyncio.sleep(0)  # the refinement starts (its task), then ends
    if svc.refiner.tasks:
        await asyncio.gather(*svc.refiner.tasks)
    if answer is None or not answer.text:
        return None
    rest = rest_of_line(site.text, site.offset)
    return site.text[: site.offset] + fit(answer.text, rest) + site.text[site.offset + len(rest):]


async def arm(engine: EngineClient, sites: list[Site], opts: dict[str, Any]) -> dict[str, dict[str, Any]]:
    rows: dict[str, dict[str, Any]] = {}
    for kind in KINDS:
        outs = [await shown_at(engine, s, opts) for s in sites if s.kind == kind]
        shown = [o for o in outs if o is not None]
        broken = sum(not ast_parses(o) for o in shown)
        rows[kind] = {"sites": len(outs), "shown": len(shown), "broken": broken,
                      "broken_share": broken / len(shown) if shown else 0.0,
                      "empty_share": 1 - len(shown) / len(outs) if outs else 0.0}
    every = list(rows.values())
    shown_all = sum(r["shown"] for r in every)
    rows["all"] = {"sites": sum(r["sites"] for r in every), "shown": shown_all,
                   "broken": sum(r["broken"] for r in every),
                   "broken_share": sum(r["broken"] for r in every) / shown_all if shown_all else 0.0,
                   "empty_share": 1 - shown_all / max(1, sum(r["sites"] for r in every))}
    return rows


def big_file(lines: int) -> str:
    """The held-out files that parse, joined (each a statement sequence at column 0) until `lines`."""
    parts: list[str] = []
    n = 0
    for _name, text in sources():
        parts.append(text.rstrip("\n") + "\n\n\n")
        n += parts[-1].count("\n")
        if n >= lines:
            break
    return "".join(parts)


def cost(lines: int, per_kind: int, seed: int) -> dict[str, Any]:
    """The guard's check cost on one huge file (see the module docstring)."""
    from llada_lsp.completion.guard import Guard
    from llada_lsp.text.syntax import parser_for

    text = big_file(lines)
    parser = parser_for("python")
    assert parser is not None
    t0 = time.perf_counter()
    parser.parse(text.encode())
    parse_ms = (time.perf_counter() - t0) * 1000
    rng = random.Random(seed)
    checks: list[float] = []
    requests: list[float] = []

    @dataclass(frozen=True)
    class Timed(Guard):
        def breaks(self, suggestion: str) -> bool:  # each check timed
            t = time.perf_counter()
            try:
                return super().breaks(suggestion)
            finally:
                checks.append((time.perf_counter() - t) * 1000)

    wrong = sites = 0
    for kind in KINDS:
        got = 0
        while got < per_kind:
            cut = CUTTERS[kind](text, rng)
            if cut is None:
                continue
            doc, at = cut
            got += 1
            sites += 1
            rest = rest_of_line(doc, at)
            guard = Timed("python", doc, at, rest, parser.parse(doc.encode()))  # the document's own tree
            t1 = time.perf_counter()
            passed = [c for c in (guard.cut(b) for b in BAD) if c]
            requests.append((time.perf_counter() - t1) * 1000)
            for c in passed[:1]:  # Python's own parser on the whole file: the costly part, once a site
                wrong += not ast_parses(doc[:at] + fit(c, rest) + doc[at + len(rest):])
    checks.sort()
    requests.sort()

    def q(xs: list[float], f: float) -> float:
        return round(xs[min(len(xs) - 1, int(f * len(xs)))], 1) if xs else 0.0
    return {"lines": text.count("\n"), "bytes": len(text.encode()), "sites": sites, "checks": len(checks),
            "parse_ms": round(parse_ms, 1), "check_p50_ms": q(checks, 0.5), "check_p99_ms": q(checks, 0.99),
            "check_max_ms": q(checks, 1.0), "request_p50_ms": q(requests, 0.5), "request_max_ms": q(requests, 1.0),
            "check_p50_over_parse": round(q(checks, 0.5) / parse_ms, 3) if parse_ms else None, "wrong": wrong}


async def run(args: argparse.Namespace) -> dict[str, Any]:
    sites = make_sites(args.per_kind, args.seed)
    base = {"mode": "speedy", "speculative": False, "debounceMs": 0}
    results: dict[str, Any] = {}
    t0 = time.perf_counter()
    for name in args.engines.split(","):
        engine: EngineClient
        if name == "model":
            engine = make_engine("inprocess", model_dir=args.model, mode="speedy", device="cpu")
        else:
            engine = ScriptedEngine([{"after": "", "done": BAD[0], "alternatives": BAD[1:]}])
        engine.set_deadlines(0, 0)  # none: on a busy machine a slow answer is no empty one
        await engine.start(lambda *a, **k: None)
        try:
            if name == "model" and engine.state != "ready":
                raise SystemExit(f"engine did not start: {engine.error}")
            results[name] = {a: await arm(engine, sites, {**base, "syntaxCheck": a == "on"}) for a in ("off", "on")}
        finally:
            await engine.close()
    print(f"{'engine':9} {'arm':4} {'kind':9} {'sites':>5} {'shown':>5} {'broken':>6} {'broken%':>7} {'empty%':>6}")
    for name, arms in results.items():
        for a, rows in arms.items():
            for kind, r in rows.items():
                print(f"{name:9} {a:4} {kind:9} {r['sites']:5d} {r['shown']:5d} {r['broken']:6d} "
                      f"{100 * r['broken_share']:7.1f} {100 * r['empty_share']:6.1f}")
    if args.cost_lines:
        c = cost(args.cost_lines, args.cost_sites, args.seed)
        print(f"cost on {c['lines']} lines ({c['bytes']} B, one parse {c['parse_ms']} ms): {c['checks']} checks at "
              f"{c['sites']} sites, p50 {c['check_p50_ms']} / p99 {c['check_p99_ms']} / max {c['check_max_ms']} ms; "
              f"per request p50 {c['request_p50_ms']} / max {c['request_max_ms']} ms; wrong {c['wrong']}")
        results_cost: dict[str, Any] | None = c
    else:
        results_cost = None
    out = {"bench": "guard", "per_kind": args.per_kind, "seed": args.seed, "sites": len(sites), "cost": results_cost,
           "seconds": round(time.perf_counter() - t0, 1),
           "engines": {n: {a: {k: {f: round(v, 4) if isinstance(v, float) else v for f, v in r.items()}
                               for k, r in rows.items()} for a, rows in arms.items()}
                       for n, arms in results.items()}}
    print(json.dumps(out))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None)
    ap.add_argument("--per-kind", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--engines", default="model,scripted")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--cost-lines", type=int, default=50_000, help="the huge file's lines for the cost (0: none)")
    ap.add_argument("--cost-sites", type=int, default=4, help="sites per kind in the huge file")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
