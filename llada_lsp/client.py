"""The LSP client of llada-lsp's own tools: the demo, the benches and the tests drive the
server through it (over stdio, as an editor does).

`Recorder` is a pygls `LanguageClient` (mix it in front of another one, e.g. pytest-lsp's)
that records the server's `llada/*` notifications with their arrival times and can wait for
one without polling (`until`). `LladaClient` adds the session: start the server, initialize,
wait for the engine, shut down. The request helpers below take any pygls client. Torch-free.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from lsprotocol import types as t
from pygls.lsp.client import LanguageClient

from engine.api import TextEdit, apply_edits
from engine.daemon import child
from llada_lsp import __version__
from llada_lsp.text.positions import Encoding, LineIndex

# the server of this checkout, over stdio; isolated from the current directory (child.FLAGS)
SERVER = tuple(child.python_command("llada_lsp"))
T = TypeVar("T")


class EngineStartError(RuntimeError):
    """The server's engine failed to start (a refused or unreadable model): the server's reason."""


def plain(obj: Any) -> Any:
    """pygls hands custom-message params over as namedtuples: back to dicts and lists."""
    if hasattr(obj, "_asdict"):
        return {k: plain(v) for k, v in obj._asdict().items()}
    if isinstance(obj, (list, tuple)):
        return [plain(v) for v in obj]
    return obj


@dataclass(frozen=True)
class Note:
    """A notification from the server: when it arrived (`time.perf_counter()`), and what."""

    at: float
    method: str
    params: dict[str, Any]


class Recorder(LanguageClient):
    """Records `llada/refine`, `llada/stats` and `llada/status` (in `notes`, and by kind)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.notes: list[Note] = []
        self.refines: list[dict[str, Any]] = []
        self.stats: list[dict[str, Any]] = []
        self.statuses: list[dict[str, Any]] = []
        self.init_result: t.InitializeResult | None = None
        self._arrived = asyncio.Event()
        for method, kept in (("llada/refine", self.refines), ("llada/stats", self.stats),
                             ("llada/status", self.statuses)):
            self.feature(method)(self._recorder(method, kept))

    def _recorder(self, method: str, kept: list[dict[str, Any]]) -> Callable[[Any, Any], None]:
        def record(ls: Any, params: Any) -> None:
            p = plain(params)
            self.notes.append(Note(time.perf_counter(), method, p))
            kept.append(p)
            self._arrived.set()

        return record

    async def until(self, found: Callable[[], T | None], timeout: float) -> T:
        """`found()` once it is truthy, checked after each notification (TimeoutError after
        `timeout` seconds)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            value = found()
            if value:
                return value
            self._arrived.clear()
            await asyncio.wait_for(self._arrived.wait(), max(0.0, deadline - loop.time()))

    def refines_of(self, cid: str) -> list[Note]:
        """The `llada/refine` notes of completion `cid`, in arrival order."""
        return [n for n in self.notes
                if n.method == "llada/refine" and n.params["completionId"] == cid]

    def stats_of(self, cid: str) -> dict[str, Any] | None:
        return next((s for s in reversed(self.stats) if s["completionId"] == cid), None)

    async def final_refine(self, cid: str, timeout: float = 60.0) -> dict[str, Any]:
        """The final `llada/refine` of completion `cid` (waits for it)."""
        return await self.until(lambda: next((r for r in self.refines
                                              if r["completionId"] == cid and r["final"]), None),
                                timeout)

    async def engine_settled(self, timeout: float = 300.0, after: int = 0) -> dict[str, Any]:
        """The first `llada/status` from index `after` on saying the engine is ready or failed."""
        return await self.until(lambda: next((s for s in self.statuses[after:]
                                              if s["state"] in ("ready", "error")), None), timeout)


def capabilities(encodings: Sequence[str] = ("utf-16",), *, progress: bool = False,
                 configuration: bool = False) -> t.ClientCapabilities:
    """An editor's capabilities: inline completion, the position encodings it offers."""
    return t.ClientCapabilities(
        general=t.GeneralClientCapabilities(position_encodings=list(encodings)),
        window=t.WindowClientCapabilities(work_done_progress=progress),
        workspace=t.WorkspaceClientCapabilities(configuration=configuration),
        text_document=t.TextDocumentClientCapabilities(
            inline_completion=t.InlineCompletionClientCapabilities()))



def server_command(script: str | None = None, *python_args: str) -> list[str]:
    """The command that starts the server: this checkout's (`SERVER`), or `script` run by this
    Python; `python_args` go to the interpreter (e.g. `-m cProfile -o out`), after the
    isolation flags."""
    return [sys.executable, *child.FLAGS, *python_args, *([script] if script else ["-m", "llada_lsp"])]

class LladaClient(Recorder):
    """A pygls client with the session steps."""

    def __init__(self, name: str = "llada-client") -> None:
        super().__init__(name, __version__)
        self.server_pid = 0

    async def start(self, init: dict[str, Any], command: Sequence[str] = SERVER,
                    env: dict[str, str] | None = None, caps: t.ClientCapabilities | None = None,
                    timeout: float = 300.0, transient_errors: bool = False, root_uri: str | None = None,
                    cwd: str | None = None) -> None:
        """Start the server (`command`), initialize it with `init` (initializationOptions)
        and wait for its engine; RuntimeError when the engine fails (`transient_errors`: wait
        past failures for "ready", as while a daemon is being started). `root_uri`: the
        workspace folder (workspace context indexes it). `env` (default: this process's) gets
        `child.python_env`'s safe PYTHONPATH; `cwd`: where the server runs (an editor: the
        workspace)."""
        await self.start_io(*command, env=child.python_env(env), cwd=cwd)
        server = getattr(self, "_server", None)
        self.server_pid = server.pid if server is not None else 0
        self.init_result = await self.initialize_async(t.InitializeParams(
            capabilities=caps or capabilities(), initialization_options=init, root_uri=root_uri))
        self.initialized(t.InitializedParams())
        if transient_errors:
            await self.until(lambda: any(s["state"] == "ready" for s in self.statuses), timeout)
            return
        status = await self.engine_settled(timeout)
        if status["state"] != "ready":
            raise EngineStartError(f"the server's engine did not start: {status.get('message', '')}")

    async def close(self, timeout: float = 10.0) -> None:
        """shutdown, exit, and the process is gone."""
        try:
            await asyncio.wait_for(self.shutdown_async(None), timeout)
            self.exit(None)
        finally:
            await self.stop()


# -- requests and notifications (any pygls client) -----------------------------------------------
def open_document(client: LanguageClient, uri: str, language_id: str, text: str,
                  version: int = 1) -> None:
    client.text_document_did_open(t.DidOpenTextDocumentParams(
        t.TextDocumentItem(uri=uri, language_id=language_id, version=version, text=text)))


def insert(client: LanguageClient, uri: str, version: int, line: int, character: int,
           text: str) -> None:
    """A didChange inserting `text` at (line, character), as a keystroke or a paste."""
    at = t.Position(line, character)
    client.text_document_did_change(t.DidChangeTextDocumentParams(
        t.VersionedTextDocumentIdentifier(version=version, uri=uri),
        [t.TextDocumentContentChangePartial(range=t.Range(at, at), text=text)]))


def apply_lsp_edits(text: str, edits: list[dict[str, Any]], encoding: Encoding = "utf-16") -> str:
    """`text` with LSP text edits (as `llada/refine` carries them: ranges in the negotiated
    position encoding, all against `text`) applied, as an editor applies them."""
    index = LineIndex.of(text)

    def off(p: dict[str, int]) -> int:
        return index.offset(p["line"], p["character"], encoding)

    return apply_edits(text, [TextEdit(off(e["range"]["start"]), off(e["range"]["end"]), e["newText"])
                              for e in edits])


def send_inline(client: LanguageClient, uri: str, pos: t.Position, invoked: bool = False,
                selected: t.SelectedCompletionInfo | None = None) -> asyncio.Future[Any]:
    """An inline completion request, written at once (as an editor does on a keystroke):
    Automatic, or Invoked (the user asked); `selected`: the completion widget's item."""
    kind = t.InlineCompletionTriggerKind.Invoked if invoked else t.InlineCompletionTriggerKind.Automatic
    return client.protocol.send_request_async(t.TEXT_DOCUMENT_INLINE_COMPLETION, t.InlineCompletionParams(
        text_document=t.TextDocumentIdentifier(uri), position=pos,
        context=t.InlineCompletionContext(trigger_kind=kind, selected_completion_info=selected)))


def keystroke(client: LanguageClient, uri: str, version: int, line: int, character: int,
              ch: str) -> tuple[t.Position, asyncio.Future[Any]]:
    """One typed character as an editor sends it: the didChange inserting `ch` at (line,
    character) and, written at once, an Automatic inline completion request at the cursor after
    it. Returns that cursor and the request's answer."""
    insert(client, uri, version, line, character, ch)
    pos = t.Position(line + 1, 0) if ch == "\n" else t.Position(line, character + 1)
    return pos, send_inline(client, uri, pos)


async def inline(client: LanguageClient, uri: str, pos: t.Position, invoked: bool = False,
                 selected: t.SelectedCompletionInfo | None = None) -> t.InlineCompletionList | None:
    res = await send_inline(client, uri, pos, invoked, selected)
    if isinstance(res, list):  # a bare item list (not what llada-lsp sends)
        return t.InlineCompletionList(items=res)
    assert res is None or isinstance(res, t.InlineCompletionList), res
    return res


def item_texts(res: t.InlineCompletionList | None) -> list[str]:
    """The insert texts of an inline completion answer's items, in order."""
    return [i.insert_text if isinstance(i.insert_text, str) else i.insert_text.value
            for i in (res.items if res else [])]


def first_text(res: t.InlineCompletionList | None) -> str:
    texts = item_texts(res)
    return texts[0] if texts else ""


def completion_id(res: t.InlineCompletionList | list[t.InlineCompletionItem] | None) -> str | None:
    """The completion id in the first item's accept command (None for a bare list of items:
    the server always answers with a list object)."""
    if not isinstance(res, t.InlineCompletionList) or not res.items:
        return None
    if res.items[0].command is None or not res.items[0].command.arguments:
        return None
    return str(res.items[0].command.arguments[0])


async def debug_info(client: LanguageClient) -> dict[str, Any]:
    """The server's `llada/debugInfo`: counters, engine state, why requests got nothing."""
    return dict(plain(await client.protocol.send_request_async("llada/debugInfo", {})))


def send_next_edit(client: LanguageClient, uri: str, version: int | None, pos: t.Position,
                   edited: t.Range | None = None) -> asyncio.Future[Any]:
    """A `llada/nextEdit` request, written at once (as an editor does after its debounce);
    `edited`: the range just edited (docs/lsp.md "Next-edit suggestions")."""
    params: dict[str, Any] = {"textDocument": {"uri": uri, "version": version},
                              "position": {"line": pos.line, "character": pos.character}}
    if edited is not None:
        params["range"] = {"start": {"line": edited.start.line, "character": edited.start.character},
                           "end": {"line": edited.end.line, "character": edited.end.character}}
    return client.protocol.send_request_async("llada/nextEdit", params)


async def next_edit(client: LanguageClient, uri: str, version: int | None, pos: t.Position,
                    edited: t.Range | None = None) -> dict[str, Any]:
    """The answer of `llada/nextEdit` as a dict: {version, suggestions, reason?}."""
    return dict(plain(await send_next_edit(client, uri, version, pos, edited)))
