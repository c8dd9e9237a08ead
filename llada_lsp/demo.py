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
from pygls.lsp.client import LanguageClient

from llada_lsp.samples import DEFAULT
from llada_lsp.syntax import normalize_language


def _plain(obj: Any) -> Any:
    if hasattr(obj, "_asdict"):
        return {k: _plain(v) for k, v in obj._asdict().items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    return obj


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
        self.client = LanguageClient("llada-demo", "0.1")
        self.refines: dict[str, list[tuple[float, dict[str, Any]]]] = {}
        self.stats: dict[str, dict[str, Any]] = {}
        self.ready = asyncio.Event()
        self.changed = asyncio.Event()  # a refinement or stats notification arrived
        self.status = ""

        @self.client.feature("llada/refine")
        def _refine(ls: Any, params: Any) -> None:
            p = _plain(params)
            self.refines.setdefault(p["completionId"], []).append((time.perf_counter(), p))
            self.changed.set()

        @self.client.feature("llada/stats")
        def _stats(ls: Any, params: Any) -> None:
            p = _plain(params)
            self.stats[p["completionId"]] = p
            self.changed.set()

        @self.client.feature("llada/status")
        def _status(ls: Any, params: Any) -> None:
            p = _plain(params)
            self.status = f"{p['state']} {p.get('message', '')}".strip()
            if p["state"] in ("ready", "error"):
                self.ready.set()

    def say(self, msg: str) -> None:
        print(msg, file=self.out, flush=True)

    async def start(self, server_cmd: list[str], init: dict[str, Any]) -> None:
        t0 = time.perf_counter()
        await self.client.start_io(*server_cmd)
        await self.client.initialize_async(t.InitializeParams(
            capabilities=t.ClientCapabilities(
                general=t.GeneralClientCapabilities(position_encodings=["utf-16"])),
            initialization_options=init))
        self.client.initialized(t.InitializedParams())
        await asyncio.wait_for(self.ready.wait(), 300)
        if not self.status.startswith("ready"):
            raise RuntimeError(f"the server's engine did not start: {self.status}")
        self.say(f"server ready in {(time.perf_counter() - t0) * 1000:.0f} ms")

    async def request(self, uri: str, line: int, col: int, invoked: bool) -> list[t.InlineCompletionItem]:
        kind = t.InlineCompletionTriggerKind.Invoked if invoked else t.InlineCompletionTriggerKind.Automatic
        res = await self.client.text_document_inline_completion_async(t.InlineCompletionParams(
            text_document=t.TextDocumentIdentifier(uri), position=t.Position(line, col),
            context=t.InlineCompletionContext(kind)))
        return list(res.items if isinstance(res, t.InlineCompletionList) else (res or []))

    async def complete(self, uri: str, line: int, col: int, timeout: float) -> None:
        t0 = time.perf_counter()
        try:
            items = await self.request(uri, line, col, invoked=False)
        except JsonRpcException as e:  # e.g. a position past the end: the server's message
            self.say(f"--- {line + 1}:{col + 1}  error: {e}")
            return
        first_ms = (time.perf_counter() - t0) * 1000
        if not items:
            info = await self.client.protocol.send_request_async("llada/debugInfo", {})
            why = info.get("lastEmptyReason", "") if isinstance(info, dict) else getattr(info, "lastEmptyReason", "")
            self.say(f"--- {line + 1}:{col + 1}  no suggestion ({first_ms:.0f} ms){': ' + why if why else ''}")
            return
        item = items[0]
        text = item.insert_text if isinstance(item.insert_text, str) else item.insert_text.value
        cid = str(item.command.arguments[0]) if item.command and item.command.arguments else ""
        self.say(f"--- {line + 1}:{col + 1}  first draft after {first_ms:.0f} ms:")
        self.say(_indent(text))
        deadline = time.monotonic() + timeout
        seen, final_at = 0, 0.0
        while time.monotonic() < deadline:
            got = self.refines.get(cid, [])
            for when, p in got[seen:]:
                ms = (when - t0) * 1000
                tag = "final" if p["final"] else f"refined (step {p['step']})"
                changed = "" if p["edits"] else " (unchanged)"
                self.say(f"    {tag} at {ms:.0f} ms{changed}:")
                if p["edits"]:
                    self.say(_indent(p["text"]))
                if p["final"]:
                    final_at = final_at or time.monotonic()
            seen = len(got)
            # the stats notification follows the final refinement; give it a moment
            if final_at and (cid in self.stats or time.monotonic() - final_at > 2.0):
                break
            self.changed.clear()
            wait = min(deadline, final_at + 2.0 if final_at else deadline) - time.monotonic()
            try:
                await asyncio.wait_for(self.changed.wait(), max(0.0, wait))
            except TimeoutError:
                continue
        st = self.stats.get(cid)
        if st:
            reuse = st["reusedTokens"] / max(1, st["reusedTokens"] + st["prefillTokens"])
            self.say(f"    {st['kind']}: {st['forwards']} forwards, {st['tokens']} tokens, "
                     f"{st['tpf']:.1f} tokens/forward, prompt reuse {reuse:.0%}, "
                     f"engine {st['engineMs']:.0f} ms, server overhead {st['overheadMs']:.1f} ms")
        t1 = time.perf_counter()
        cands = await self.request(uri, line, col, invoked=True)
        texts = [i.insert_text if isinstance(i.insert_text, str) else i.insert_text.value for i in cands]
        self.say(f"    cycling (an Invoked request, {(time.perf_counter() - t1) * 1000:.0f} ms): "
                 f"{len(texts)} candidate{'s' if len(texts) != 1 else ''} that fit")
        final = next((p["text"] for _, p in reversed(self.refines.get(cid, [])) if p["final"]), text)
        for k, cand in enumerate(texts, 1):
            self.say(f"    [{k}]" + (" (the suggestion above)" if cand == final else ""))
            if cand != final:
                self.say(_indent(cand))

    async def stop(self) -> None:
        try:
            await asyncio.wait_for(self.client.shutdown_async(None), 10)
            self.client.exit(None)
        finally:
            await self.client.stop()


def _indent(text: str) -> str:
    return "\n".join("    | " + line for line in text.split("\n"))


async def run(args: argparse.Namespace) -> int:
    path = Path(args.file).resolve()
    text = path.read_text(encoding="utf-8")
    uri = path.as_uri()
    lang = args.language or normalize_language("", uri)
    cmd = [sys.executable, "-m", "llada_lsp"] + (["--log-file", args.log_file, "-v"]
                                                  if args.log_file else [])
    init: dict[str, Any] = {"mode": args.mode}
    if args.model:
        init["model"] = args.model
    demo = Demo()
    demo.say(f"llada-lsp demo: {path.name} ({lang}), model "
             f"{args.model or os.environ.get('LLADA_MODEL') or 'embedded'}")
    await demo.start(cmd, init)
    try:
        demo.client.text_document_did_open(t.DidOpenTextDocumentParams(
            t.TextDocumentItem(uri=uri, language_id=lang, version=1, text=text)))
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
            demo.client.text_document_did_change(t.DidChangeTextDocumentParams(
                t.VersionedTextDocumentIdentifier(version=version, uri=uri),
                [t.TextDocumentContentChangePartial(
                    range=t.Range(t.Position(line, end), t.Position(line, end)),
                    text="\n" + indent)]))
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
    p.add_argument("--mode", default="speedy", choices=["speedy", "quality"])
    p.add_argument("--max-positions", type=int, default=3)
    p.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for the final")
    p.add_argument("--log-file", help="server log file (-v)")
    args = p.parse_args(argv)
    return asyncio.run(run(args))
