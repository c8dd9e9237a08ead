"""Next-edit suggestions: after one real-looking edit, are the follow-ups found and right?

    python bench/next_edit.py [--quick] [--per-kind N] [--models tiny-code,mini-code] [--seed 0]
                              [--threads 1] [--site-tokens 12] [--analysis-lines 5000]

Tasks come from the held-out standard-library files of `engine/train/heldout.txt` (never
training files), one edit each, the language server's own pipeline run on it
(`llada_lsp.nextedit.edit_analysis.analyze` -> `llada_lsp.nextedit.edit_window` suggestions, masked fills through
`TextEngine.complete`, `keep`: off the edited line, no parse error added). Kinds:
- `rename`: a parameter or local of a function (or a module-level function) renamed at its
  binding to a name of another token count; its true sites are found by an oracle independent
  of the analysis: CPython's `symtable` says in which scope each name is local, and every
  identifier use of the old name resolving to the renamed binding is a site. `distractor`
  marks tasks where a textual rename of the file is wrong (the name in strings or comments,
  in other functions, shadowed, or an attribute of another object);
- `param_added`: a real parameter of a module-level function removed from its def and its
  calls, then typed back at the def: the true follow-ups are the original arguments;
- `param_removed`, `param_reordered` (two parameters swapped): the calls' arguments follow;
- `noise`: a changed string or number, a comment line added, a use switched to another
  name: any suggestion is a false positive.
- `field_added` (Python dataclass/NamedTuple, Go, Rust), `return_added` (a value added to a
  Python function's returned tuple: its `a, b = f(...)` unpackings follow) and the JS/Go/Rust
  method-call rows `param_* [lang]`: on sources written for this bench
  (`bench/next_edit_written.py`, bench/data/next_edit: the held-out stdlib files hold no
  dataclass, no tuple of 3+ values unpacked from a function of the same file and no other
  language), distinct tasks only, so their counts are smaller.

Per kind: location precision and recall (a suggestion is located when it changes exactly the
span of a true site's call argument list or identifier), content exact match at located
sites (the site's text after the suggestion equals the truth), false-positive rate on noise
(edits with any suggestion), p50 latency from the edit to the answer (analysis + fills +
checks; the trees of the two texts are given, as the server holds them), and which part wrote
the content (`analysis`, `model` or `placeholder`: an added argument or field no fill reaches
is the name, marked for the user to type over, as the server shows it; its content is exact
only where the name was the argument). Intervals: Wilson 95%. Beside it the textual baseline (a
file-wide whole-word rename of a changed word; for parameter changes a comma split of each
`name(` call's arguments: the parameter's name inserted, the argument removed or swapped).
The gate: per model, the lowest confidence threshold on model fills with overall precision
>= 0.9, and the recall there (on by default only when >= 0.5): analysis suggestions and fills
count when exact, a placeholder when located (it claims a place, not content). Also the analysis alone on a
`--analysis-lines` file (held-out files joined). Prints a table; ends with one JSON line.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.next_edit_score import evaluate, gate, gated  # noqa: E402
from bench.next_edit_systems import Answer, rows_fill, server_pipeline, textual  # noqa: E402
from bench.next_edit_tasks import PARSER, Task, files, make_tasks  # noqa: E402
from llada_lsp.nextedit.edit_analysis import analyze  # noqa: E402


def analysis_speed(lines: int) -> dict[str, Any]:
    """The analysis alone on a `lines`-line file (held-out files joined): a module-level
    function renamed at the top (its uses looked up in the whole file) and a parameter added."""
    body, texts = "", files(200_000)
    for _key, t in texts:
        if body.count("\n") >= lines:
            break
        body += t + "\n"
    body = "\n".join(body.split("\n")[:lines])
    body = re.sub(r"(?m)^(if __name__.*)$", r"\1", body)
    head = "def helper_fn(a, b):\n    return a\n\n\n"
    tail = "\n\nx = helper_fn(1, 2)\ny = helper_fn(3, 4)\n"
    head = "from dataclasses import dataclass\n\n\n@dataclass\nclass Rec:\n    a: int\n    b: int\n\n\n" + head
    head += "def pair(x):\n    return x, x\n\n\n"
    tail += "r = Rec(1, 2)\ns = Rec(a=3, b=4)\np, q = pair(1)\n"
    old = head + body + tail
    cases = {"rename": old.replace("def helper_fn(", "def helper(", 1),
             "param_added": old.replace("def helper_fn(a, b)", "def helper_fn(a, b, c)", 1),
             "field_added": old.replace("    b: int\n", "    b: int\n    c: str\n", 1),
             "return_added": old.replace("    return x, x\n", "    return x, x, x\n", 1)}
    out: dict[str, Any] = {"lines": old.count("\n")}
    ot = PARSER.parse(old.encode())
    for name, new in cases.items():
        nt = PARSER.parse(new.encode())
        ms = []
        for _ in range(15):
            t0 = time.perf_counter()
            a = analyze("python", old, new, ot, nt)
            ms.append((time.perf_counter() - t0) * 1000)
        out[name] = {"kind": a.kind, "sites": len(a.sites), "p50_ms": round(statistics.median(ms), 3)}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="tiny-code,mini-code")
    ap.add_argument("--quick", action="store_true", help="3 tasks per kind")
    ap.add_argument("--per-kind", type=int, default=40)
    ap.add_argument("--site-tokens", type=int, default=12)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--analysis-lines", type=int, default=5000)
    args = ap.parse_args()
    tasks = make_tasks(3 if args.quick else args.per_kind, args.seed)
    rows, _ = evaluate("textual", tasks, textual)
    a_rows, a_answers = evaluate("server default (fills off: placeholders)", tasks,
                                 lambda t: server_pipeline(t, None, args.site_tokens))
    rows += a_rows
    gates: dict[str, Any] = {"default": gate(tasks, a_answers)}
    from engine.service import TextEngine

    for model in [m for m in args.models.split(",") if m]:
        eng = TextEngine(model, threads=args.threads)
        warm = make_tasks(1, args.seed + 1)  # a first forward pays one-off costs: not timed
        fill = rows_fill(eng)
        for t in warm:
            server_pipeline(t, fill, args.site_tokens)

        def with_fills(t: Task, f: Callable[[list[Any]], list[tuple[str, float]]] = fill) -> Answer:
            return server_pipeline(t, f, args.site_tokens)

        m_rows, m_answers = evaluate(f"model {model} (every fill)", tasks, with_fills)
        rows += m_rows
        gates[model] = g = gate(tasks, m_answers)
        # the default: what the server shows at the gated threshold
        rows += evaluate(f"model {model} @ gate {g['threshold']}", tasks, gated(iter(m_answers), float(g["threshold"])))[0]
    speed = analysis_speed(args.analysis_lines)
    counts = {k: sum(1 for t in tasks if t.key == k) for k in dict.fromkeys(t.key for t in tasks)}
    counts["rename_distractor"] = sum(1 for t in tasks if t.kind == "rename" and t.distractor)
    print(f"next-edit: {len(tasks)} held-out tasks {counts}, site budget {args.site_tokens} tokens")
    print(f"{'system':50} {'kind':30} {'sugg':>5} {'P':>6} {'P 95%':>13} {'R':>6} {'R 95%':>13} {'EM':>6} "
          f"{'FP':>6} {'p50 ms':>8}")
    for r in rows:
        if r["kind"] == "all":
            print(f"{r['system']:50} {'all (latency)':30} {'':>5} {'':>6} {'':>13} {'':>6} {'':>13} {'':>6} {'':>6} "
                  f"{r['p50_ms']:8.1f}  p95 {r['p95_ms']:.1f}")
        elif r["kind"] == "noise":
            print(f"{r['system']:50} {r['kind']:30} {r['suggestions']:5} {'':>6} {'':>13} {'':>6} {'':>13} {'':>6} "
                  f"{r['fp_rate']:6.3f} {r['p50_ms']:8.1f}")
        else:
            print(f"{r['system']:50} {r['kind']:30} {r['suggestions']:5} {r['precision']:6.3f} "
                  f"{str(r['precision_ci']):>13} {r['recall']:6.3f} {str(r['recall_ci']):>13} {r['content_em']:6.3f} "
                  f"{'':>6} {r['p50_ms']:8.1f}")
    for name, g in gates.items():
        print(f"gate {name}: {g}")
    print(f"analysis alone on a {speed['lines']}-line file: {speed}")
    print(json.dumps({"bench": "next_edit", "tasks": counts, "site_tokens": args.site_tokens, "rows": rows,
                      "gates": gates, "analysis_speed": speed}))


if __name__ == "__main__":
    main()
