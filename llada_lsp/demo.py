"""`llada-lsp demo [FILE] [--positions LINE:COL ...]`: the server seen from an editor.

Starts `llada-lsp` as a subprocess over stdio with a real LSP client (pygls), opens FILE
(default: the bundled sample), asks for inline completions at a few positions and prints
each suggestion as first drafted, every refinement (`llada/refine`) and the final text,
with timings (`llada/stats`), as an editor sees them while typing (Automatic requests).
Then, as when the user presses the next-suggestion key, an Invoked request at the same
place lists the other candidates that fit (cycling).

Without --positions, the demo acts like a user who presses Enter after the docstring of
each function whose body is only a docstring (a didChange, as an editor sends it) and
waits for the body to be suggested.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path
from typing import Any

from lsprotocol import types as t
from pygls.exceptions import JsonRpcException

from engine.presets import DEFAULT_PRESET, MODES
from llada_lsp.client import (
    SERVER,
    EngineStartError,
    LladaClient,
    debug_info,
    inline,
    insert,
    item_texts,
    open_document,
)
from llada_lsp.samples import DEFAULT
from llada_lsp.text.syntax import normalize_language


def docstring_holes(text: str) -> list[tuple[int, str]]:
    """(line, indentation) after each docstring that is the whole body of a function."""
    lines = text.split("\n")
    holes = []
    for i, line in enumerate(lines[:-1]):
        s = line.strip()
        prev = lines[i - 1].rstrip() if i > 0 else ""
        if prev.lstrip().startswith("def ") and prev.endswith(":") and s.startswith('"""') \
                and s.endswith('"""') and len(s) > 6:
            nxt = next((x for x in lines[i + 1:] if x.strip()), "")
            indent = line[: len(line) - len(line.lstrip())]
            if len(nxt) - len(nxt.lstrip()) < len(indent):
                holes.append((i, indent))
    return holes


class Demo:
    def __init__(self, out: Any = sys.stdout) -> None:
        self.out = out
        self.client = LladaClient("llada-demo")
        # the server's showMessage repeats what its status says (printed once, below)
        self.client.feature(t.WINDOW_SHOW_MESSAGE)(lambda ls, params: None)

    def say(self, msg: str) -> None:
        print(msg, file=self.out, flush=True)

    async def start(self, server_cmd: list[str], init: dict[str, Any]) -> None:
        t0 = time.perf_counter()
        await self.client.start(init, server_cmd)
        self.say(f"server ready in {(time.perf_counter() - t0) * 1000:.0f} ms")

    async def complete(self, uri: str, line: int, col: int, timeout: float) -> None:
        t0 = time.perf_counter()
        try:
            res = await inline(self.client, uri, t.Position(line, col))
        except JsonRpcException as e:  # e.g. a position past the end: the server's message
            self.say(f"--- {line + 1}:{col + 1}  error: {e}")
            return
        first_ms = (time.perf_counter() - t0) * 1000
        if not res or not res.items:
            why = (await debug_info(self.client)).get("lastEmptyReason", "")
            self.say(f"--- {line + 1}:{col + 1}  no suggestion ({first_ms:.0f} ms){': ' + why if why else ''}")
            return
        text = item_texts(res)[0]
        item = res.items[0]
        cid = str(item.command.arguments[0]) if item.command and item.command.arguments else ""
        self.say(f"--- {line + 1}:{col + 1}  first draft after {first_ms:.0f} ms:")
        self.say(_indent(text))
        await self.follow(cid, t0, timeout)
        t1 = time.perf_counter()
        texts = item_texts(await inline(self.client, uri, t.Position(line, col), invoked=True))
        self.say(f"    cycling (an Invoked request, {(time.perf_counter() - t1) * 1000:.0f} ms): "
                 f"{len(texts)} candidate{'s' if len(texts) != 1 else ''} that fit")
        final = next((n.params["text"] for n in reversed(self.client.refines_of(cid))
                      if n.params["final"]), text)
        for k, cand in enumerate(texts, 1):
            self.say(f"    [{k}]" + (" (the suggestion above)" if cand == final else ""))
            if cand != final:
                self.say(_indent(cand))

    async def follow(self, cid: str, t0: float, timeout: float) -> None:
        """Print the refinements of `cid` as they arrive, until its stats (which follow the
        final refinement; given 2 s more), then the stats."""
        seen, deadline = 0, t0 + timeout

        def news() -> bool:
            return len(self.client.refines_of(cid)) > seen or self.client.stats_of(cid) is not None

        while self.client.stats_of(cid) is None:
            try:
                await self.client.until(news, deadline - time.perf_counter())
            except TimeoutError:
                break
            got = self.client.refines_of(cid)
            for n in got[seen:]:
                p = n.params
                tag = "final" if p["final"] else f"refined (step {p['step']})"
                changed = "" if p["edits"] else " (unchanged)"
                self.say(f"    {tag} at {(n.at - t0) * 1000:.0f} ms{changed}:")
                if p["edits"]:
                    self.say(_indent(p["text"]))
                if p["final"]:
                    deadline = min(deadline, n.at + 2.0)
            seen = len(got)
        st = self.client.stats_of(cid)
        if st:
            reuse = st["reusedTokens"] / max(1, st["reusedTokens"] + st["prefillTokens"])
            self.say(f"    {st['kind']}: {st['forwards']} forwards, {st['tokens']} tokens, "
                     f"{st['tpf']:.1f} tokens/forward, prompt reuse {reuse:.0%}, "
                     f"engine {st['engineMs']:.0f} ms, server overhead {st['overheadMs']:.1f} ms")

    async def stop(self) -> None:
        await self.client.close()


def _indent(text: str) -> str:
    return "\n".join("    | " + line for line in text.split("\n"))


async def run(args: argparse.Namespace) -> int:
    path = Path(args.file).resolve()
    text = path.read_text(encoding="utf-8")
    uri = path.as_uri()
    lang = args.language or normalize_language("", uri)
    cmd = [*SERVER, *(["--log-file", args.log_file, "-v"] if args.log_file else [])]
    init: dict[str, Any] = {"mode": args.mode}
    if args.model:
        init["model"] = args.model
    demo = Demo()
    demo.say(f"llada-lsp demo: {path.name} ({lang}), model "
             f"{args.model or os.environ.get('LLADA_MODEL') or 'embedded'}")
    try:
        await demo.start(cmd, init)
    except EngineStartError as e:  # a refused model: the server's one-line reason, no traceback
        await demo.stop()
        print(f"llada-lsp demo: {e}", file=sys.stderr)
        return 2
    try:
        open_document(demo.client, uri, lang, text)
        version = 1
        if args.positions:
            for spec in args.positions:
                line_s, _, col_s = spec.partition(":")
                await demo.complete(uri, int(line_s) - 1, max(0, int(col_s or 1) - 1),
                                    args.timeout)
            return 0
        holes = docstring_holes(text)
        if not holes:
            demo.say("no positions given and no docstring-only functions found")
            return 1
        shift = 0
        for line, indent in holes[: args.max_positions]:
            line += shift
            end = len(text.split("\n")[line])
            version += 1  # the user presses Enter: a new indented line below the docstring
            insert(demo.client, uri, version, line, end, "\n" + indent)
            lines = text.split("\n")
            lines.insert(line + 1, indent)
            text = "\n".join(lines)
            shift += 1
            await demo.complete(uri, line + 1, len(indent), args.timeout)
        return 0
    finally:
        await demo.stop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="llada-lsp demo", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("file", nargs="?", default=str(DEFAULT), help="file to open (default: "
                   "the bundled sample)")
    p.add_argument("--positions", nargs="+", metavar="LINE:COL",
                   help="1-based cursor positions to complete at")
    p.add_argument("--language", help="languageId (default: from the file extension)")
    p.add_argument("--model", help="model directory (default: $LLADA_MODEL or the embedded)")
    p.add_argument("--mode", default=DEFAULT_PRESET, choices=MODES)
    p.add_argument("--max-positions", type=int, default=3)
    p.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for the final")
    p.add_argument("--log-file", help="server log file (-v)")
    args = p.parse_args(argv)
    return asyncio.run(run(args))
