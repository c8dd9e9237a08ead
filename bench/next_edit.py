"""Next-edit suggestions after a rename: precision and recall of the follow-up edits.

    python bench/next_edit.py [--quick] [--tasks N] [--window LINES] [--thresholds 0.8,0.5,0.2]
                              [--max-passes 4] [--model DIR] [--seed 0]

Tasks come from the held-out standard-library files of `engine/train/heldout.txt` (as
bench/tasks.py picks them; never training files). Each task makes one real-looking edit: a
parameter of a function, or a local variable at its first assignment, is renamed at its
definition to a name the file does not use. Token-to-token edits keep the token count, so by
default the new name is one (of a fixed list of common names, then `name_<suffix>`) with which
the renamed window has as many tokens as the original: a follow-up the model can express
(`--any-length`: the first unused `name_<suffix>`, mostly out of T2T's reach). The next-edit request
then covers a window of up to `--window` lines after the edited line, inside the function
(the edited line itself is in the prefix, as the editor would send it after the keystroke);
tasks whose window holds no use of the old name are skipped.

True sites: the identifier nodes (tree-sitter) in the window that name the renamed variable
(not attribute names `x.name`, not keyword-argument names `f(name=...)`); each must become the
new name.

Scoring (the same for the model and the baseline). A suggestion replaces region[start:end] by
text. It is *correct* when its range overlaps at least one true site (for an empty range:
touches one) and applying it alone turns the span region[lo:hi] (lo, hi: the union of its
range and the sites it overlaps) into exactly that span with those sites renamed, nothing
else changed. precision = correct suggestions / suggestions; recall = true sites overlapped
by a correct suggestion / true sites; both micro-averaged over the tasks (a row with no
suggestions has precision 0 by convention, reported with its count).

Baseline: the textual rename of the old name to the new one in the window (every whole-word
match, strings, comments and attributes included), one suggestion per match.

Also: latency p50/p95 (the done event's total_ms) and forwards per request. Prints a table and
ends with one JSON line.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tree_sitter_python
from tree_sitter import Language, Node, Parser

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.tasks import parses  # noqa: E402
from engine.api import EditSuggestion, NextEditRequest  # noqa: E402
from engine.train.corpus import heldout_files, read_text  # noqa: E402

PY = Language(tree_sitter_python.language())
SUFFIXES = ("new", "val", "obj", "ref", "arg", "item")
NAMES = ("value", "item", "data", "result", "obj", "node", "key", "name", "count", "total", "size", "path",
         "text", "line", "entry", "index", "args", "res", "out", "buf", "msg", "val", "num", "tmp")


@dataclass(frozen=True)
class RenameTask:
    source: str
    old: str
    new: str
    prefix: str
    region: str
    suffix: str
    sites: tuple[tuple[int, int], ...]  # character ranges of the old name in `region`


def _text(n: Node) -> str:
    return (n.text or b"").decode("utf-8")


def _is_use(n: Node) -> bool:
    """An identifier node that names a variable (not `x.attr`, not `f(kw=...)`'s keyword)."""
    p = n.parent
    if p is None:
        return False
    if p.type == "attribute" and p.child_by_field_name("attribute") == n:
        return False
    return not (p.type == "keyword_argument" and p.child_by_field_name("name") == n)


def _definitions(fn: Node) -> list[Node]:
    """The renameable definitions of a function: its plain parameters and the left sides of
    its plain assignments `name = ...` (first one per name)."""
    out: list[Node] = []
    params = fn.child_by_field_name("parameters")
    for c in params.named_children if params is not None else []:
        ident = c if c.type == "identifier" else c.child_by_field_name("name") \
            if c.type in ("default_parameter", "typed_parameter", "typed_default_parameter") else None
        if ident is not None and ident.type == "identifier" and _text(ident) not in ("self", "cls"):
            out.append(ident)
    seen = {_text(i) for i in out}
    stack = [fn.child_by_field_name("body")]
    while stack:
        n = stack.pop()
        if n is None or n.type in ("function_definition", "class_definition", "lambda"):
            continue
        if n.type == "assignment":
            left = n.child_by_field_name("left")
            if left is not None and left.type == "identifier" and _text(left) not in seen:
                seen.add(_text(left))
                out.append(left)
        stack.extend(reversed(n.named_children))
    return out


def _line_start(text: str, i: int) -> int:
    return text.rfind("\n", 0, i) + 1


def make_tasks(n: int, window: int, seed: int = 0, max_file_chars: int = 60_000,
               tok: Any = None) -> list[RenameTask]:
    """`tok` (a tokenizers.Tokenizer): pick new names that keep the window's token count."""
    files = sorted((f for f in heldout_files() if f.key.startswith("stdlib/")), key=lambda f: f.key)
    texts = [(f.key, t) for f in files if (t := read_text(f)) and len(t) <= max_file_chars and t.isascii()
             and parses(t)]
    rng = random.Random(seed)
    tasks: list[RenameTask] = []
    tries = 0
    while len(tasks) < n and tries < n * 60:
        tries += 1
        key, text = rng.choice(texts)
        root = Parser(PY).parse(text.encode("utf-8")).root_node
        fns = [c for c in _walk(root) if c.type == "function_definition"]
        if not fns:
            continue
        fn = rng.choice(fns)
        defs = _definitions(fn)
        if not defs:
            continue
        d = rng.choice(defs)
        task = _task(key, text, fn, d, rng, window, tok)
        if task is not None:
            tasks.append(task)
    return tasks


def _walk(root: Node) -> list[Node]:
    out, stack = [], [root]
    while stack:
        n = stack.pop()
        out.append(n)
        stack.extend(n.named_children)
    return out


def _task(key: str, text: str, fn: Node, d: Node, rng: random.Random, window: int, tok: Any) -> RenameTask | None:
    old = _text(d)
    # ascii files: byte offsets are character offsets
    a, b = d.start_byte, d.end_byte
    line_end = text.find("\n", b)
    if line_end < 0:
        return None
    r0 = line_end + 1  # the window starts on the line after the edit (original offsets)
    r1 = r0
    for _ in range(window):  # whole lines, up to the function's last one
        nxt = text.find("\n", r1)
        if nxt < 0 or r1 >= fn.end_byte:
            break
        r1 = nxt + 1
    if r1 <= r0:
        return None
    sites = tuple((n.start_byte - r0, n.end_byte - r0) for n in _walk(fn)
                  if n.type == "identifier" and _text(n) == old and r0 <= n.start_byte and n.end_byte <= r1
                  and _is_use(n))
    if not sites:
        return None
    sites = tuple(sorted(sites))
    region = text[r0:r1]
    names = [*rng.sample(NAMES, len(NAMES)), *(f"{old}_{x}" for x in rng.sample(SUFFIXES, len(SUFFIXES)))] \
        if tok is not None else [f"{old}_{rng.choice(SUFFIXES)}"]
    for new in names:
        if new == old or re.search(rf"\b{re.escape(new)}\b", text):
            continue
        if tok is not None and len(tok.encode(_renamed(region, sites, new)).ids) != len(tok.encode(region).ids):
            continue
        edited = text[:a] + new + text[b:]
        shift = len(new) - len(old)
        return RenameTask(key, old, new, edited[: r0 + shift], edited[r0 + shift: r1 + shift],
                          edited[r1 + shift:], sites)
    return None


def _renamed(region: str, sites: tuple[tuple[int, int], ...], new: str) -> str:
    for a, b in sorted(sites, reverse=True):
        region = region[:a] + new + region[b:]
    return region


def score(task: RenameTask, suggestions: tuple[EditSuggestion, ...]) -> tuple[int, int, int]:
    """(correct suggestions, suggestions, true sites covered by a correct one)."""
    correct, covered = 0, set()
    for s in suggestions:
        hit = [(a, b) for a, b in task.sites if (a < s.end and s.start < b) or (s.start == s.end and a <= s.start <= b)]
        if not hit:
            continue
        lo, hi = min(s.start, *(a for a, _ in hit)), max(s.end, *(b for _, b in hit))
        want = task.region[lo:hi]
        for a, b in sorted(hit, reverse=True):
            want = want[: a - lo] + task.new + want[b - lo:]
        got = task.region[lo: s.start] + s.text + task.region[s.end: hi]
        if got == want:
            correct += 1
            covered.update(hit)
    return correct, len(suggestions), len(covered)


def textual(task: RenameTask) -> tuple[EditSuggestion, ...]:
    return tuple(EditSuggestion(m.start(), m.end(), task.new, 1.0)
                 for m in re.finditer(rf"\b{re.escape(task.old)}\b", task.region))


def pct(xs: list[float], q: float) -> float:
    if not xs:
        return 0.0
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))]


def summarize(name: str, per_task: list[tuple[int, int, int]], n_sites: int, ms: list[float],
              forwards: list[int]) -> dict[str, float | str]:
    c = sum(t[0] for t in per_task)
    s = sum(t[1] for t in per_task)
    cov = sum(t[2] for t in per_task)
    return {"name": name, "precision": round(c / s, 4) if s else 0.0, "recall": round(cov / max(1, n_sites), 4),
            "suggestions": s, "correct": c, "p50_ms": round(pct(ms, 0.5), 2), "p95_ms": round(pct(ms, 0.95), 2),
            "forwards_per_request": round(statistics.fmean(forwards), 3) if forwards else 0.0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None)
    ap.add_argument("--quick", action="store_true", help="3 tasks")
    ap.add_argument("--tasks", type=int, default=60)
    ap.add_argument("--window", type=int, default=12, help="lines after the edited line")
    ap.add_argument("--thresholds", default="preset,0.5,0.2", help="'preset': the engine preset's edit threshold")
    ap.add_argument("--max-passes", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--any-length", action="store_true", help="new names regardless of their token count")
    args = ap.parse_args()
    from engine.service import TextEngine

    eng = TextEngine(args.model, threads=args.threads)
    tasks = make_tasks(3 if args.quick else args.tasks, args.window, args.seed,
                       tok=None if args.any_length else eng.tok)
    n_sites = sum(len(t.sites) for t in tasks)
    rows = [summarize("textual rename", [score(t, textual(t)) for t in tasks], n_sites, [], [])]
    for th in args.thresholds.split(","):
        threshold = None if th == "preset" else float(th)
        per, ms, fw = [], [], []
        for i, t in enumerate(tasks):
            req = NextEditRequest(f"ne-{i}", t.source, t.prefix, t.region, t.suffix, threshold=threshold,
                                  max_passes=args.max_passes)
            done = list(eng.next_edit(req))[-1]
            if done.kind != "done" or done.stats is None:
                raise SystemExit(f"task {i} ({t.source}) failed: {done.error}")
            per.append(score(t, done.suggestions))
            ms.append(float(done.stats["total_ms"]))
            fw.append(int(done.stats["forwards"]))
        rows.append(summarize(f"model @ {th}", per, n_sites, ms, fw))
    info = eng.info()
    print(f"next-edit after a rename: {len(tasks)} tasks, {n_sites} true sites, window {args.window} lines, "
          f"model {info['model']} ({info['dtype']}), max_passes {args.max_passes}, "
          f"{'any-length' if args.any_length else 'same-token-count'} names")
    print(f"{'row':18} {'prec':>6} {'recall':>6} {'sugg':>5} {'ok':>4} {'p50 ms':>8} {'p95 ms':>8} {'fwd/req':>7}")
    for r in rows:
        print(f"{r['name']:18} {r['precision']:6.3f} {r['recall']:6.3f} {r['suggestions']:5} {r['correct']:4} "
              f"{r['p50_ms']:8.1f} {r['p95_ms']:8.1f} {r['forwards_per_request']:7.2f}")
    print(json.dumps({"bench": "next_edit", "model": info["model"], "tasks": len(tasks), "sites": n_sites,
                      "window": args.window, "max_passes": args.max_passes,
                      "same_token_count": not args.any_length, "rows": rows}))


if __name__ == "__main__":
    main()
