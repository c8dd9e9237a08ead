"""Cross-file completion: does workspace context help the model complete a line that uses a
name defined in another file of the same package? And does context cost single-file tasks?

    python bench/crossfile.py [--quick] [--tasks N] [--ordinary N] [--model DIR] [--preset quality]

Tasks (deterministic from --seed): the target file is a held-out file (engine/train/heldout.txt)
whose directory holds other corpus files; the line to complete (cursor after its indentation,
stop rule "line", as bench/tasks.py's single_line) uses a name that another file of that
directory defines (a function, class, method or module constant, found with Python's `ast`:
engine/train/crossfile.py) and that the target file binds nowhere. Only the target file has to
be held out: context files are read, never predicted, so they may be training files (most
held-out files are transformers' and pygments' modules, whose neighbours mostly are).

Arms, on the same requests (`CompletionRequest.context`, laid out by the engine's builder):
- `none`: no context;
- `near`: definition chunks of the cross-file names used in the lines around the cursor (6 above,
  3 below, nearest first), what a gatherer sees before the line is written;
- `defs`: the definitions of the names the line to complete uses, then those of `near`: the
  gatherer's best case (the definitions it would find once the name is typed, or from imports);
- `server`: what the language server itself sends (`llada_lsp.context.workspace.WorkspaceContext`): the
  target file open without the line, its package directory as the workspace folder (indexed
  by `llada_lsp.context.workspace_index`), within the safety limit of the `contextTokens` default for
  this engine (the engine's builder places what fits its share in tokens).
The ordinary single-file tasks (bench/tasks.py's single_line, held-out standard-library files)
run with no context and with one unrelated chunk (a definition from another held-out file):
context must not cost them.

Exact match with 95% Wilson intervals, edit similarity with bootstrap intervals, and per arm
against `none` the paired bootstrap interval of the exact-match difference and ratio. Also, on
the cross-file tasks, `names`: the share of completions that use every cross-file name of the
line (whatever the rest of the line): a finer sign of context being read than exact match.
`given` (cross-file tasks): the share of prompts whose kept context defines a name the line
uses, whatever the model does with it: the gatherer's recall. Prints a table and ends with one
JSON line.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.ab import chosen  # noqa: E402
from bench.decode import wilson  # noqa: E402
from bench.tasks import Task, edit_similarity, exact_match, make_tasks  # noqa: E402
from engine.api import CompletionRequest, ContextChunk, Plan  # noqa: E402
from engine.train.corpus import all_files, heldout_files, read_text  # noqa: E402
from engine.train.crossfile import (  # noqa: E402
    PackageIndex,
    bound_names,
    code_lines,
    definitions,
    display_path,
    module_names,
    near_names,
    package_of,
    packages,
)

CROSS_ARMS = ("none", "near", "defs", "server")
PER_FILE = 3  # tasks per target file at most (spread over files)
BOOT = 2000


@dataclass(frozen=True)
class CrossTask:
    task: Task
    names: tuple[str, ...]  # the cross-file names the line uses
    near: tuple[ContextChunk, ...]
    defs: tuple[ContextChunk, ...]


def make_cross_tasks(n: int, seed: int = 0) -> list[CrossTask]:
    """Up to `n` cross-file tasks from held-out target files, at most PER_FILE a file, spread
    over files in a seeded order."""
    held = {f.key for f in heldout_files()}
    files = {f.key: f for f in all_files()}
    pkgs = packages(files)
    indexes: dict[str, PackageIndex] = {}
    rng = random.Random(seed)
    per_file: list[list[CrossTask]] = []
    for key in sorted(held):
        pkg = package_of(key)
        if pkg not in pkgs or key not in files:
            continue
        text = read_text(files[key])
        bound = bound_names(text) if text else None
        code_at = code_lines(text) if text else None
        if text is None or bound is None or code_at is None:
            continue
        if pkg not in indexes:
            indexes[pkg] = PackageIndex((k, t) for k in pkgs[pkg] if (t := read_text(files[k])) is not None)
        index = indexes[pkg]
        lines = text.split("\n")
        mods = module_names(text)
        found: list[CrossTask] = []
        for i in sorted(code_at):
            ln = lines[i]
            code = ln.strip()
            if len(code) < 8 or code.startswith(('"', "'", "@", "import ", "from ")):
                continue
            names = index.cross_names(ln, key, bound, mods)
            if not names:
                continue
            start = sum(len(x) + 1 for x in lines[:i]) + len(ln) - len(ln.lstrip(" \t"))
            end = start + len(code)
            task = Task("crossfile", key, text[:start], text[start:end], text[end:], Plan(max_tokens=48, stop="line"))
            near = near_names(index, lines, i, key, bound, mods)
            found.append(CrossTask(task, tuple(names), tuple(index.context_for(near, key)),
                                   tuple(index.context_for([*names, *(w for w in near if w not in names)], key))))
        if found:
            rng.shuffle(found)
            per_file.append(found[:PER_FILE])
    rng.shuffle(per_file)
    out: list[CrossTask] = []
    for k in range(PER_FILE):  # round robin: every file's first task before any file's second
        out += [ts[k] for ts in per_file if len(ts) > k]
    return out[:n]


def unrelated_chunks(tasks: Sequence[Task], seed: int) -> list[ContextChunk]:
    """For each ordinary task, a definition chunk from another held-out standard-library file."""
    pool = []
    for f in sorted((f for f in heldout_files() if f.key.startswith("stdlib/")), key=lambda f: f.key):
        text = read_text(f)
        if text:
            pool += [d for d in definitions(text, f.key) if d.kind in ("function", "class")]
    rng = random.Random(seed)
    out = []
    for t in tasks:
        cands = [d for d in pool if d.path != t.source]
        out.append(rng.choice(cands).chunk())
    return out


def server_contexts(cross: Sequence[CrossTask], max_context_tokens: int | None) -> list[tuple[ContextChunk, ...]]:
    """The language server's own context for each task: its gatherer over the package folder,
    the target document open with the line removed and the cursor where the line starts."""
    from llada_lsp.context.workspace import WorkspaceContext, gather_limit
    from llada_lsp.context.workspace_index import WorkspaceIndex
    from llada_lsp.options import Options
    from llada_lsp.text.documents import DocumentStore

    paths = {f.key: f.path for f in all_files()}
    limit = gather_limit(Options().context_tokens, max_context_tokens)
    indexes: dict[Path, WorkspaceIndex] = {}
    out = []
    for c in cross:
        path = paths[c.task.source]
        index = indexes.get(path.parent)
        if index is None:
            index = indexes[path.parent] = WorkspaceIndex()
            index.set_roots([path.parent.as_uri()])
            index.scan("python")
        store = DocumentStore()
        uri = path.as_uri()
        doc = store.open(uri, "python", 1, c.task.prefix + c.task.suffix)
        ws = WorkspaceContext(store, index)
        out.append(ws.chunks_for(doc, len(c.task.prefix), c.task.prefix + c.task.suffix, limit))
        ws.closed(uri)
    return out


@dataclass
class Score:
    em: list[bool]
    es: list[float]
    ctx_chunks: list[int]
    ms: list[float]
    hit: list[bool]  # cross-file tasks: the completion names every cross-file name of the line
    given: list[bool]  # cross-file tasks: a chunk the prompt kept defines a name the line uses


def defines_any(chunks: Sequence[ContextChunk], names: Sequence[str]) -> bool:
    """Whether one of `chunks` holds the definition (def, class or assignment) of one of `names`."""
    return any(re.search(rf"^\s*(?:(?:async\s+)?def|class)\s+{re.escape(w)}\b|^\s*{re.escape(w)}\s*[:=]", c.text, re.M)
               for w in names for c in chunks)


def names_hit(text: str, names: Sequence[str]) -> bool:
    """Whether `text` uses every name of `names` (as whole identifiers): the sign that the model
    wrote the other file's name, whether or not the rest of the line matches."""
    got = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", text))
    return all(w in got for w in names)


def run_arm(eng, tasks: Sequence[Task], contexts: Sequence[Sequence[ContextChunk]], preset: str,  # noqa: ANN001
            names: Sequence[Sequence[str]] | None = None) -> Score:
    s = Score([], [], [], [], [], [])
    for k, (t, ctx) in enumerate(zip(tasks, contexts, strict=True)):
        eng.prompt_cache.clear()
        doc = display_path(t.source)
        req = CompletionRequest(f"xf-{k}", doc, t.prefix, t.suffix, replace(t.plan, preset=preset), tuple(ctx))
        t0 = time.perf_counter()
        done = list(eng.complete(req))[-1]
        s.ms.append((time.perf_counter() - t0) * 1e3)
        text = chosen(t, done)
        s.em.append(exact_match(text, t.middle))
        s.es.append(edit_similarity(text, t.middle))
        placed = eng.prompts.layout(t.prefix, t.suffix, False, doc, tuple(ctx)).context
        s.ctx_chunks.append(len(placed))
        if names is not None:
            s.hit.append(names_hit(text, names[k]))
            s.given.append(defines_any(placed, names[k]))
    return s


def mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def boot_mean(xs: Sequence[float], seed: int = 0) -> tuple[float, float]:
    """95% percentile bootstrap interval of a mean."""
    if not xs:
        return 0.0, 0.0
    rng = random.Random(seed)
    n = len(xs)
    ms = sorted(sum(xs[rng.randrange(n)] for _ in range(n)) / n for _ in range(BOOT))
    return ms[int(0.025 * BOOT)], ms[int(0.975 * BOOT) - 1]


def paired_effect(base: Score, arm: Score, seed: int = 0) -> dict[str, Any]:
    """`arm` against `base` on the same tasks: exact-match difference and ratio with paired
    bootstrap intervals (the ratio's bounds are None where a resample has no base match),
    edit-similarity difference, and exact-match wins and losses."""
    n = len(base.em)
    rng = random.Random(seed)
    diffs, ratios, es_d, hit_d = [], [], [], []
    hits = len(base.hit) == n and len(arm.hit) == n
    for _ in range(BOOT):
        idx = [rng.randrange(n) for _ in range(n)]
        b = sum(base.em[i] for i in idx)
        a = sum(arm.em[i] for i in idx)
        diffs.append((a - b) / n)
        ratios.append(a / b if b else float("inf"))
        es_d.append(sum(arm.es[i] - base.es[i] for i in idx) / n)
        if hits:
            hit_d.append(sum(arm.hit[i] - base.hit[i] for i in idx) / n)
    diffs.sort()
    ratios.sort()
    es_d.sort()
    hit_d.sort()
    lo, hi = int(0.025 * BOOT), int(0.975 * BOOT) - 1
    b_em, a_em = sum(base.em), sum(arm.em)

    def finite(x: float) -> float | None:
        return round(x, 3) if x != float("inf") else None

    return {"em_diff": round((a_em - b_em) / n, 4), "em_diff_ci": [round(diffs[lo], 4), round(diffs[hi], 4)],
            "em_ratio": finite(a_em / b_em) if b_em else None,
            "em_ratio_ci": [finite(ratios[lo]), finite(ratios[hi])],
            "es_diff": round(mean(arm.es) - mean(base.es), 4), "es_diff_ci": [round(es_d[lo], 4), round(es_d[hi], 4)],
            "em_wins": sum(a and not b for a, b in zip(arm.em, base.em, strict=True)),
            "em_losses": sum(b and not a for a, b in zip(arm.em, base.em, strict=True)),
            **({"hit_diff": round((sum(arm.hit) - sum(base.hit)) / n, 4),
                "hit_diff_ci": [round(hit_d[lo], 4), round(hit_d[hi], 4)]} if hits else {})}


def doubles(none: dict[str, Any], arm: dict[str, Any], effect: dict[str, Any]) -> bool:
    """The issue's goal for one context arm: at least twice the exact match of `none`, and a gain
    whose paired interval excludes 0 (from 0 matches, one lucky task would "double" nothing)."""
    em, base = float(arm["exact_match"]), float(none["exact_match"])
    lo = effect["em_diff_ci"][0]
    return em >= 2 * base and lo > 0


def summary(s: Score) -> dict[str, Any]:
    k, n = sum(s.em), len(s.em)
    return {"n": n, "exact_match": round(k / max(1, n), 4), "em_ci": [round(x, 4) for x in wilson(k, n)],
            "edit_sim": round(mean(s.es), 4), "es_ci": [round(x, 4) for x in boot_mean(s.es)],
            "context_chunks": round(mean(s.ctx_chunks), 2), "ms_mean": round(mean(s.ms), 1),
            **({"name_hit": round(sum(s.hit) / n, 4), "hit_ci": [round(x, 4) for x in wilson(sum(s.hit), n)],
                "def_given": round(sum(s.given) / n, 4)} if s.hit else {})}


def given_only(model: str | None, n: int, seed: int, budgets: Sequence[int]) -> None:
    """The gatherers' recall without the model: for each prompt budget, the share of tasks whose
    kept context (the engine's builder, no torch) defines a name the line uses, and the share of
    kept chunks that do (its precision)."""
    from engine.model.model_path import resolve
    from engine.prompt.builder import PromptBuilder

    cross = make_cross_tasks(n, seed)
    rows: dict[str, dict[str, float]] = {}
    for budget in budgets:
        builder = PromptBuilder.from_dir(resolve(model), budget)
        contexts = {"near": [c.near for c in cross], "defs": [c.defs for c in cross],
                    "server": server_contexts(cross, builder.max_context_tokens)}
        for arm, ctxs in contexts.items():
            placed = [builder.layout(c.task.prefix, c.task.suffix, False, display_path(c.task.source), tuple(x)).context
                      for c, x in zip(cross, ctxs, strict=True)]
            kept = [len(p) for p in placed]
            given = [defines_any(p, c.names) for c, p in zip(cross, placed, strict=True)]
            useful = sum(defines_any((ch,), c.names) for c, p in zip(cross, placed, strict=True) for ch in p)
            prec = useful / max(1, sum(kept))
            rows[f"{arm}@{budget}"] = {"given": round(sum(given) / len(cross), 4), "chunks": round(mean(kept), 2),
                                       "useful_chunks": round(prec, 4)}
            print(f"{arm:8} prompt {budget:5d}: given {sum(given):3d}/{len(cross)} = {sum(given) / len(cross):.3f}, "
                  f"chunks kept {mean(kept):.2f}, of which define a name of the line {prec:.3f}")
    print(json.dumps({"bench": "crossfile_given", "tasks": len(cross), "rows": rows}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None)
    ap.add_argument("--quick", action="store_true", help="6 cross-file and 6 ordinary tasks")
    ap.add_argument("--tasks", type=int, default=150, help="cross-file tasks")
    ap.add_argument("--ordinary", type=int, default=100, help="ordinary single-line tasks")
    ap.add_argument("--preset", default="quality", help="as shipped: quality's shown candidate of its alternatives")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--given-only", default="", metavar="N,N",
                    help="no decoding: the gatherers' `given` at these prompt budgets (tokens), e.g. 448,4096")
    args = ap.parse_args()
    n_cross, n_ord = (6, 6) if args.quick else (args.tasks, args.ordinary)
    from engine.service import TextEngine

    if args.given_only:
        given_only(args.model, n_cross, args.seed, [int(x) for x in args.given_only.split(",")])
        return
    t_start = time.perf_counter()
    eng = TextEngine(args.model, threads=args.threads)
    cross = make_cross_tasks(n_cross, args.seed)
    ordinary = [t for t in make_tasks(n_ord, args.seed) if t.kind == "single_line"][:n_ord] if n_ord else []
    unrelated = unrelated_chunks(ordinary, args.seed)
    ctasks = [c.task for c in cross]
    names = [c.names for c in cross]
    arms: dict[str, Score] = {
        "crossfile/none": run_arm(eng, ctasks, [()] * len(ctasks), args.preset, names),
        "crossfile/near": run_arm(eng, ctasks, [c.near for c in cross], args.preset, names),
        "crossfile/defs": run_arm(eng, ctasks, [c.defs for c in cross], args.preset, names),
        "crossfile/server": run_arm(eng, ctasks, server_contexts(cross, eng.info().get("max_context_tokens")),
                                    args.preset, names),
    }
    if ordinary:
        arms["ordinary/none"] = run_arm(eng, ordinary, [()] * len(ordinary), args.preset)
        arms["ordinary/unrelated"] = run_arm(eng, ordinary, [(c,) for c in unrelated], args.preset)
    effects = {f"crossfile/{a}": paired_effect(arms["crossfile/none"], arms[f"crossfile/{a}"])
               for a in CROSS_ARMS[1:]}
    if ordinary:
        effects["ordinary/unrelated"] = paired_effect(arms["ordinary/none"], arms["ordinary/unrelated"])
    sums = {k: summary(v) for k, v in arms.items()}
    model = eng.info()["model"]
    print(f"cross-file bench, model {model}, preset {args.preset}, {len(ctasks)} cross-file tasks "
          f"({len({t.source for t in ctasks})} held-out target files), {len(ordinary)} ordinary tasks, "
          f"{time.perf_counter() - t_start:.0f} s")
    hdr = (f"{'arm':20} {'n':>4} {'EM':>6} {'EM 95% CI':>13} {'ES':>6} {'ES 95% CI':>13} {'chunks':>6} "
           f"{'given':>5} {'dEM vs none (CI)':>24} {'EM x':>6} {'+/-':>7} {'names':>6} {'dnames (CI)':>23}")
    print(hdr)
    print("-" * len(hdr))
    for k, s in sums.items():
        e = effects.get(k)
        eff = ""
        if e is not None:
            ratio = f"{e['em_ratio']:.2f}" if e["em_ratio"] is not None else "n/a"
            lo, hi = e["em_diff_ci"]
            eff = f"{e['em_diff']:+.3f} ({lo:+.3f},{hi:+.3f}) {ratio:>6} {e['em_wins']:3d}/{e['em_losses']:<3d}"
        hit = f"{s['name_hit']:6.3f}" if "name_hit" in s else " " * 6
        if e is not None and "hit_diff" in e:
            hit += f" {e['hit_diff']:+.3f} ({e['hit_diff_ci'][0]:+.3f},{e['hit_diff_ci'][1]:+.3f})"
        print(f"{k:20} {s['n']:4d} {s['exact_match']:6.3f} {s['em_ci'][0]:6.3f}-{s['em_ci'][1]:<6.3f} "
              f"{s['edit_sim']:6.3f} {s['es_ci'][0]:6.3f}-{s['es_ci'][1]:<6.3f} {s['context_chunks']:6.2f} "
              f"{s.get('def_given', 0.0):5.3f} {eff:>38} {hit}")
    none_em = sums["crossfile/none"]["exact_match"]
    doubled = any(doubles(sums["crossfile/none"], sums[f"crossfile/{a}"], effects[f"crossfile/{a}"])
                  for a in CROSS_ARMS[1:])
    print(f"goal (context at least doubles exact match, its gain's interval above 0): {'met' if doubled else 'not met'} "
          f"(none {none_em:.3f}, defs {sums['crossfile/defs']['exact_match']:.3f}, "
          f"near {sums['crossfile/near']['exact_match']:.3f}, server {sums['crossfile/server']['exact_match']:.3f})")
    print(json.dumps({"bench": "crossfile", "model": model, "preset": args.preset, "seed": args.seed,
                      "tasks": {"crossfile": len(ctasks), "ordinary": len(ordinary),
                                "target_files": len({t.source for t in ctasks})},
                      "arms": sums, "effects": effects, "goal_doubles_em": doubled}))


if __name__ == "__main__":
    main()
