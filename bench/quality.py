"""Quality on HumanEval single-line infilling: exact match, edit similarity, parse validity, pass@1.

    python bench/quality.py [--quick] [--limit N] [--model DIR] [--presets speedy,quality,...]

The cursor sits after the line's indentation; the model chooses the length (stop rule "line").
Presets run as shipped: `quality` is scored on the candidate of its alternatives the language
server would show (bench.ab.chosen).
pass@1: prompt + completion + suffix + test runs in a fresh subprocess within a timeout.
Prints a table and ends with one JSON line.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.ab import chosen  # noqa: E402
from bench.tasks import Task, edit_similarity, exact_match, parses  # noqa: E402
from engine.api import CompletionRequest, Plan  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
EVAL_DIR = Path(os.environ.get("LLADA_EVAL_DIR", ROOT.parent / "shared" / "eval" / "human-eval-infilling"))


def load_tasks(limit: int) -> list[dict]:
    path = EVAL_DIR / "HumanEval-SingleLineInfilling.jsonl.gz"
    rows = [json.loads(line) for line in gzip.open(path, "rt")]
    step = max(1, len(rows) // limit)
    return rows[::step][:limit]  # an even spread over the problems, fixed


def split_task(row: dict) -> tuple[str, str, str]:
    line = row["canonical_solution"].rstrip("\n")
    indent = line[: len(line) - len(line.lstrip())]
    return row["prompt"] + indent, line.strip(), "\n" + row["suffix"]


def passes(program: str, timeout: float = 5.0) -> bool:
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(program)
        path = f.name
    try:
        r = subprocess.run([sys.executable, path], capture_output=True, timeout=timeout, check=False)
        return r.returncode == 0
    except subprocess.TimeoutExpired:
        return False
    finally:
        os.unlink(path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", default=None)
    ap.add_argument("--quick", action="store_true", help="30 tasks")
    ap.add_argument("--limit", type=int, default=150)
    ap.add_argument("--presets", default="one_per_step,threshold,speedy,quality")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    from engine.service import TextEngine

    eng = TextEngine(args.model, threads=args.threads)
    rows = load_tasks(30 if args.quick else args.limit)
    results: dict[str, dict[str, float]] = {}
    for preset in args.presets.split(","):
        em = es = ok = pas = empty = fw = toks = 0.0
        n_nonempty = 0
        for i, row in enumerate(rows):
            prefix, gold, suffix = split_task(row)
            eng.prompt_cache.clear()
            req = CompletionRequest(f"he-{i}", "he", prefix, suffix, Plan(max_tokens=48, stop="line", preset=preset))
            done = list(eng.complete(req))[-1]
            text = chosen(Task("he", "he", prefix, gold, suffix, req.plan), done)  # quality: its alternatives
            st = done.stats or {}
            fw += st.get("forwards", 0)  # every forward the request caused
            toks += st.get("tokens", 0)
            em += exact_match(text, gold)
            es += edit_similarity(text, gold)
            if text.strip():
                n_nonempty += 1
                ok += parses(prefix + text + suffix)
            else:
                empty += 1
            program = prefix + text + suffix + "\n" + row["test"] + f"\ncheck({row['entry_point']})\n"
            pas += passes(program)
        n = len(rows)
        results[preset] = {"exact_match": em / n, "edit_sim": es / n, "parse_ok": ok / max(1, n_nonempty),
                           "pass_at_1": pas / n, "empty": empty / n, "tpf": toks / max(1, fw)}
    print(f"HumanEval single-line infilling, {len(rows)} tasks, model {eng.info()['model']}")
    print(f"{'preset':14} {'EM':>6} {'ES':>6} {'parse':>6} {'pass@1':>7} {'empty':>6} {'TPF':>5}")
    for p, r in results.items():
        print(f"{p:14} {r['exact_match']:6.3f} {r['edit_sim']:6.3f} {r['parse_ok']:6.3f} {r['pass_at_1']:7.3f} "
              f"{r['empty']:6.3f} {r['tpf']:5.2f}")
    print(json.dumps({"model": eng.info()["model"], "tasks": len(rows),
                      "presets": {p: {k: round(v, 4) for k, v in r.items()} for p, r in results.items()}}))


if __name__ == "__main__":
    main()
