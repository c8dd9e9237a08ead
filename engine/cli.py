"""`llada-engine`: the engine's command line.

    llada-engine complete FILE --line N [--col C]   complete at a position, showing every step
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from engine.api import CompletionRequest, Plan


def _position(text: str, line: int, col: int | None) -> int:
    lines = text.split("\n")
    if not 1 <= line <= len(lines):
        raise SystemExit(f"line {line} is outside the file (1..{len(lines)})")
    c = len(lines[line - 1]) if col is None else col
    return sum(len(s) + 1 for s in lines[: line - 1]) + min(c, len(lines[line - 1]))


def cmd_complete(args: argparse.Namespace) -> int:
    from engine.service import TextEngine

    text = Path(args.file).read_text(encoding="utf-8")
    at = _position(text, args.line, args.col)
    t0 = time.perf_counter()
    eng = TextEngine(args.model, mode=args.mode)
    print(f"model {eng.info()['model']} loaded in {(time.perf_counter() - t0) * 1000:.0f} ms", file=sys.stderr)
    plan = Plan(max_tokens=args.max_tokens, stop=args.stop, preset=args.mode)
    req = CompletionRequest("cli-1", str(args.file), text[:at], text[at:], plan)
    for ev in eng.complete(req):
        if ev.kind == "done":
            s = ev.stats or {}
            print(f"done ({ev.reason}): {s.get('forwards')} forwards, {s.get('tokens')} tokens, "
                  f"TPF {s.get('tpf', 0):.2f}, first draft {s.get('first_draft_ms', 0):.0f} ms, "
                  f"total {s.get('total_ms', 0):.0f} ms")
            print("---\n" + text[:at] + "\x1b[32m" + ev.text + "\x1b[0m" + text[at:][:200])
        else:
            tag = "draft" if ev.kind == "draft" else "edit "
            print(f"[{ev.step:3d}] {tag}{'*' if ev.draft_complete else ' '} {ev.text!r}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="llada-engine", description="The llada-lsp diffusion engine.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("complete", help="complete one position of a file, printing each step")
    c.add_argument("file")
    c.add_argument("--line", type=int, required=True, help="1-based line")
    c.add_argument("--col", type=int, help="0-based column (default: end of line)")
    c.add_argument("--model", help="model directory (default: the embedded model)")
    c.add_argument("--mode", default="speedy", help="speedy | quality | a policy preset")
    c.add_argument("--max-tokens", type=int, default=64)
    c.add_argument("--stop", default="none", choices=["none", "line", "dedent", "brace", "blank_line"])
    c.set_defaults(fn=cmd_complete)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.fn(args))


if __name__ == "__main__":
    raise SystemExit(main())
