"""Completions that use names that exist: the first identifier decoded among the names in
scope (issue 43), against the same requests without the constraint.

    python bench/names.py [--quick] [--per-kind N] [--model DIR] [--preset speedy] [--scope-only]
                          [--latency-tasks N] [--latency-repeats N] [--scope-repeats N]

Tasks: the cursor inside an identifier at a use of a name bound in the same file, imported,
or defined in another file of the package, and the `definition` control (bench/name_tasks.py
says how they are drawn, deterministic from --seed, from held-out files that parse); the
`ordinary` control is bench/tasks.py's single_line tasks.

The names come from the language server's own analysis (`llada_lsp.context.name_hints.NameHints`):
the target document open with the line cut at the cursor, its directory indexed as the
workspace folder (llada_lsp.context.workspace_index). Arms on the same requests: `off` (no names) and
`on` (the names, `namesKeepOwnAbove` at its default). Per kind: the share of tasks given names
(`sent`), exact match of the identifier and of the whole line with Wilson intervals, the paired
bootstrap interval of each difference, and p50 latency (the `on` arm's includes the server's
analysis); then, for the goal's latency, up to --latency-tasks use tasks given names timed
off/on alternately --latency-repeats times, the fastest run of each arm kept. `--scope-only` times the analysis alone on a 5,000-line file: typing inside a
function (the top-level names cached) and a new place each time (nothing cached). Prints a
table and ends with one JSON line.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import statistics
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.ab import chosen  # noqa: E402
from bench.crossfile import Score, paired_effect  # noqa: E402
from bench.decode import wilson  # noqa: E402
from bench.name_tasks import KINDS, USE_KINDS, NameTask, make_name_tasks  # noqa: E402
from bench.tasks import Task, edit_similarity, exact_match, make_tasks  # noqa: E402
from engine.api import CompletionRequest, Names  # noqa: E402
from engine.train.corpus import all_files, heldout_files, read_text  # noqa: E402

IDENT = re.compile(r"[A-Za-z0-9_]*")


class ServerNames:
    """The language server's names for a task: its document open, its directory indexed."""

    def __init__(self) -> None:
        from llada_lsp.context.name_hints import NameHints
        from llada_lsp.context.workspace_index import WorkspaceIndex
        from llada_lsp.text.documents import DocumentStore

        self._store, self._hints, self._index = DocumentStore, NameHints, WorkspaceIndex
        self.hints: dict[Path, Any] = {}

    def names(self, t: Task, path: Path, keep_own_above: float) -> tuple[Names | None, float]:
        hints = self.hints.get(path.parent)
        if hints is None:
            index = self._index()
            index.set_roots([path.parent.as_uri()])
            index.scan("python")
            hints = self.hints[path.parent] = self._hints(index)
        doc = self._store().open(path.as_uri(), "python", 1, t.prefix + t.suffix)
        t0 = time.perf_counter()
        got = hints.hint(doc, len(t.prefix), doc.syntax_tree(), keep_own_above)
        return got, (time.perf_counter() - t0) * 1e3


def ident_of(typed: str, text: str) -> str:
    m = IDENT.match(text)
    return typed + (m.group() if m else "")


@dataclass
class Arm:
    ident: list[bool]
    line: list[bool]
    es: list[float]
    ms: list[float]
    sent: list[bool]
    forwards: list[int]


def run_pair(eng, tasks: list[NameTask], names: list[Names | None], names_ms: list[float],  # noqa: ANN001
             preset: str) -> tuple[Arm, Arm]:
    """Both arms, task by task (off, then on, back to back: the shared machine's load drifts
    less between them); the prompt cache is cleared before each request."""
    arms = (Arm([], [], [], [], [], []), Arm([], [], [], [], [], []))
    for k, (nt, nm, extra) in enumerate(zip(tasks, names, names_ms, strict=True)):
        t = nt.task
        for arm, given, added in ((arms[0], None, 0.0), (arms[1], nm, extra)):
            eng.prompt_cache.clear()
            req = CompletionRequest(f"n-{k}", t.source, t.prefix, t.suffix, replace(t.plan, preset=preset), (), given)
            t0 = time.perf_counter()
            done = list(eng.complete(req))[-1]
            arm.ms.append((time.perf_counter() - t0) * 1e3 + added)
            text = chosen(t, done)
            # ordinary tasks (no identifier at the cursor): the first identifier of the line
            want = nt.name or nt.typed + (IDENT.match(t.middle) or re.match("", "")).group()  # type: ignore[union-attr]
            arm.ident.append(ident_of(nt.typed, text) == want)
            arm.line.append(exact_match(text, t.middle))
            arm.es.append(edit_similarity(text, t.middle))
            arm.sent.append(given is not None)
            arm.forwards.append(int((done.stats or {}).get("forwards", 0)))
    return arms


def scope_cost(repeats: int = 200) -> dict[str, float]:
    """p50/p90 ms of the server's names on a 5,000-line file: typing inside one function
    (consecutive keystrokes: the top-level names reused) and at a new place each time (cold)."""
    from llada_lsp.context.name_hints import NameHints
    from llada_lsp.context.workspace_index import WorkspaceIndex
    from llada_lsp.text.documents import DocumentStore

    srcs = [t for f in sorted(heldout_files(), key=lambda f: f.key) if f.key.startswith("stdlib/")
            and (t := read_text(f)) and t.isascii()]
    body: list[str] = []
    for s in srcs:
        body += s.split("\n")
        if len(body) >= 5000:
            break
    text = "\n".join(body[:5000])
    store = DocumentStore()
    lines = text.split("\n")
    spots = [i for i, ln in enumerate(lines) if re.match(r"\s+\w+ = \w{4,}", ln)]
    rng = random.Random(0)
    out: dict[str, float] = {"lines": float(len(lines))}
    for mode in ("typing", "cold"):
        hints = NameHints(WorkspaceIndex())
        times = []
        i = rng.choice(spots)
        for r in range(repeats):
            if mode == "cold":
                i = rng.choice(spots)
            ln = lines[i]
            m = re.match(r"(\s+\w+ = )(\w+)", ln)
            assert m is not None
            k = 1 + r % (len(m.group(2)) - 1) if mode == "typing" else 2
            start = sum(len(x) + 1 for x in lines[:i])
            edited = text[:start] + m.group(1) + m.group(2)[:k] + text[start + len(ln):]
            doc = store.open("file:///bench/big.py", "python", r + 1, edited)
            tree = doc.syntax_tree()  # parsed by the document store before a request, as in the server
            off = start + len(m.group(1)) + k
            t0 = time.perf_counter()
            hints.hint(doc, off, tree, 0.9)
            times.append((time.perf_counter() - t0) * 1e3)
        times.sort()
        out[f"{mode}_p50_ms"] = round(statistics.median(times), 3)
        out[f"{mode}_p90_ms"] = round(times[int(0.9 * len(times))], 3)
    return out


def latency(eng, tasks: list[NameTask], names: list[Names], names_ms: list[float], preset: str,  # noqa: ANN001
            repeats: int) -> dict[str, float]:
    """Wall-clock with less of the shared machine's noise: each task's request alternately
    without and with its names, `repeats` times, the fastest of each arm kept (the `on` arm's
    plus the server's analysis); p50 over tasks of each arm and of the paired difference."""
    best_off, best_on = [], []
    for k, (nt, nm) in enumerate(zip(tasks, names, strict=True)):
        t = nt.task
        times: dict[bool, list[float]] = {False: [], True: []}
        for _ in range(repeats):
            for on in (False, True):
                eng.prompt_cache.clear()
                req = CompletionRequest(f"l-{k}", t.source, t.prefix, t.suffix, replace(t.plan, preset=preset), (),
                                        nm if on else None)
                t0 = time.perf_counter()
                list(eng.complete(req))
                times[on].append((time.perf_counter() - t0) * 1e3)
        best_off.append(min(times[False]))
        best_on.append(min(times[True]) + names_ms[k])
    return {"tasks": len(tasks), "repeats": repeats, "p50_off_ms": p50(best_off), "p50_on_ms": p50(best_on),
            "p50_added_ms": p50([b - a for a, b in zip(best_off, best_on, strict=True)])}


def p50(xs: list[float]) -> float:
    return round(statistics.median(xs), 1) if xs else 0.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None)
    ap.add_argument("--quick", action="store_true", help="8 tasks a kind")
    ap.add_argument("--per-kind", type=int, default=60)
    ap.add_argument("--preset", default="speedy", help="the server's default mode")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--scope-only", action="store_true", help="time the scope analysis alone")
    ap.add_argument("--latency-tasks", type=int, default=20, help="use tasks given names, timed off/on alternately")
    ap.add_argument("--latency-repeats", type=int, default=5)
    ap.add_argument("--scope-repeats", type=int, default=200, help="keystrokes timed a mode of the scope analysis")
    args = ap.parse_args()
    cost = scope_cost(args.scope_repeats)
    print(f"scope analysis on a {int(cost['lines'])}-line file: typing p50 {cost['typing_p50_ms']:.3f} ms "
          f"(p90 {cost['typing_p90_ms']:.3f}), a new place each time p50 {cost['cold_p50_ms']:.3f} ms "
          f"(p90 {cost['cold_p90_ms']:.3f})")
    if args.scope_only:
        print(json.dumps({"bench": "names_scope", **cost}))
        return
    from engine.service import TextEngine
    from llada_lsp.options import Options

    n = 8 if args.quick else args.per_kind
    t_start = time.perf_counter()
    eng = TextEngine(args.model, threads=args.threads)
    tasks = make_name_tasks(n, args.seed)
    paths = {f.key: f.path for f in all_files()}
    tasks["ordinary"] = [NameTask(t, "", "", paths[t.source]) for t in make_tasks(n, args.seed)
                         if t.kind == "single_line"][:n]
    server = ServerNames()
    keep = Options().names_keep_own_above
    rows: dict[str, Any] = {}
    sent_uses: list[tuple[NameTask, Names, float]] = []
    for kind in KINDS:
        ts = tasks[kind]
        if not ts:
            continue
        got = [server.names(t.task, t.path, keep) for t in ts]
        names, ms = [g[0] for g in got], [g[1] for g in got]
        if kind in USE_KINDS:
            sent_uses += [(t, nm, m) for t, nm, m in zip(ts, names, ms, strict=True) if nm is not None]
        off, on = run_pair(eng, ts, names, ms, args.preset)
        rows[kind] = _row(kind, off, on, ms)
    model = eng.info()["model"]
    print(f"names bench, model {model}, preset {args.preset}, keep own above {keep}, "
          f"{time.perf_counter() - t_start:.0f} s")
    hdr = (f"{'kind':11} {'n':>4} {'sent':>5} {'ident off':>17} {'ident on':>17} {'dIdent (CI)':>24} "
           f"{'line off':>17} {'line on':>17} {'dLine (CI)':>24} {'p50 off':>8} {'p50 on':>7} {'+p50':>6} {'names':>6} "
           f"{'fwd':>9}")
    print(hdr)
    print("-" * len(hdr))
    for kind, r in rows.items():
        def cell(s: dict[str, Any]) -> str:
            return f"{s['em']:.3f} {s['ci'][0]:.3f}-{s['ci'][1]:.3f}"

        def eff(e: dict[str, Any]) -> str:
            return f"{e['em_diff']:+.3f} ({e['em_diff_ci'][0]:+.3f},{e['em_diff_ci'][1]:+.3f})"

        print(f"{kind:11} {r['n']:4d} {r['sent']:5.2f} {cell(r['ident_off']):>17} {cell(r['ident_on']):>17} "
              f"{eff(r['ident_effect']):>24} {cell(r['line_off']):>17} {cell(r['line_on']):>17} "
              f"{eff(r['line_effect']):>24} {r['p50_off_ms']:8.1f} {r['p50_on_ms']:7.1f} {r['p50_added_ms']:+6.1f} {r['names_p50_ms']:6.2f} "
              f"{r['forwards_off']:4.1f}/{r['forwards_on']:<4.1f}")
    lat_tasks = random.Random(args.seed).sample(sent_uses, min(args.latency_tasks, len(sent_uses)))
    lat = latency(eng, [x[0] for x in lat_tasks], [x[1] for x in lat_tasks], [x[2] for x in lat_tasks], args.preset,
                  args.latency_repeats)
    print(f"latency, {lat['tasks']} use tasks given names, fastest of {lat['repeats']} alternating runs: "
          f"p50 off {lat['p50_off_ms']:.1f} ms, on {lat['p50_on_ms']:.1f} ms (analysis included), "
          f"paired p50 difference {lat['p50_added_ms']:+.1f} ms")
    goal = _goal(rows, lat)
    print("goal: " + "; ".join(f"{k} {'met' if v else 'not met'}" for k, v in goal.items()))
    print(json.dumps({"bench": "names", "model": model, "preset": args.preset, "seed": args.seed,
                      "keep_own_above": keep, "scope": cost, "kinds": rows, "latency": lat, "goal": goal}))


def _row(kind: str, off: Arm, on: Arm, names_ms: list[float]) -> dict[str, Any]:
    n = len(off.ident)

    def s(xs: list[bool]) -> dict[str, Any]:
        k = sum(xs)
        return {"em": round(k / max(1, n), 4), "ci": [round(x, 4) for x in wilson(k, n)]}

    def score(em: list[bool], arm: Arm) -> Score:
        return Score(em, arm.es, [0] * n, arm.ms, [], [])

    return {"n": n, "sent": round(sum(on.sent) / max(1, n), 4),
            "ident_off": s(off.ident), "ident_on": s(on.ident), "line_off": s(off.line), "line_on": s(on.line),
            "ident_effect": paired_effect(score(off.ident, off), score(on.ident, on)),
            "line_effect": paired_effect(score(off.line, off), score(on.line, on)),
            "p50_off_ms": p50(off.ms), "p50_on_ms": p50(on.ms), "names_p50_ms": round(statistics.median(names_ms), 3),
            "p50_added_ms": p50([b - a for a, b in zip(off.ms, on.ms, strict=True)]),
            "forwards_off": round(sum(off.forwards) / max(1, n), 2), "forwards_on": round(sum(on.forwards) / max(1, n), 2)}


def _goal(rows: dict[str, Any], lat: dict[str, float]) -> dict[str, bool]:
    uses = [rows[k] for k in USE_KINDS if k in rows]
    n = sum(r["n"] for r in uses)
    ident_on = sum(r["ident_on"]["em"] * r["n"] for r in uses) / max(1, n)
    line_off = sum(r["line_off"]["em"] * r["n"] for r in uses) / max(1, n)
    line_on = sum(r["line_on"]["em"] * r["n"] for r in uses) / max(1, n)
    controls = [rows[k] for k in ("definition", "ordinary") if k in rows]
    return {"ident_em_uses_ge_0.8": ident_on >= 0.8,
            "line_em_uses_doubled": line_on >= 2 * line_off and line_on > line_off,
            "no_loss_on_controls": all(r["line_effect"]["em_diff_ci"][1] >= 0 and r["ident_effect"]["em_diff_ci"][1] >= 0
                                       for r in controls),
            "p50_added_le_3ms": lat["p50_added_ms"] <= 3.0}


if __name__ == "__main__":
    main()
