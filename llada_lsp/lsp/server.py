"""The language server: one thin handler per LSP method.

Custom messages (docs/lsp.md): notifications `llada/refine`, `llada/stats`, `llada/status`
from the server; the requests `llada/nextEdit` and `llada/debugInfo` and the command
`llada.acceptCompletion` from the client; `textDocument/didShowCompletion` and
`textDocument/didPartiallyAcceptCompletion` (Copilot protocol style) are accepted.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from lsprotocol import types as t
from pygls.exceptions import JsonRpcInvalidParams
from pygls.lsp.server import LanguageServer

from llada_lsp import __version__
from llada_lsp.completion.answers import Selected
from llada_lsp.completion.completions import Answer, CompletionService
from llada_lsp.completion.line_rest import fit, only_deletes
from llada_lsp.completion.reporting import EngineStatus
from llada_lsp.engines.engine_client import EngineClient, make_engine
from llada_lsp.lsp.limits import LimitError, folder_uris, next_edit_params
from llada_lsp.lsp.options import (
    Options,
    OptionsError,
    parse_options,
    within_user,
    workspace_settings,
)
from llada_lsp.lsp.protocol import ARRIVAL, DID_PARTIALLY_ACCEPT, DID_SHOW, LladaProtocol
from llada_lsp.nextedit.next_edit import METHOD as NEXT_EDIT
from llada_lsp.nextedit.next_edit import NextEditParamsError, NextEditService, parse_params
from llada_lsp.text.documents import DocumentError, DocumentStore
from llada_lsp.text.positions import PositionError, units

log = logging.getLogger(__name__)

ACCEPT_COMMAND = "llada.acceptCompletion"
START_ENGINE_COMMAND = "llada.startEngine"


class LladaServer(LanguageServer):
    def __init__(self, engine_factory: Any = None) -> None:
        super().__init__("llada-lsp", __version__, protocol_cls=LladaProtocol,
                         text_document_sync_kind=t.TextDocumentSyncKind.Incremental)
        self.options = Options()
        self.store = DocumentStore(self.options.max_file_bytes)
        self.engine: EngineClient | None = None
        self.engine_factory = engine_factory
        self.service: CompletionService | None = None
        self.next_edits: NextEditService | None = None
        self.start_task: asyncio.Task[None] | None = None
        self.background: set[asyncio.Future[None]] = set()
        self.engine_status = EngineStatus(self.notify, self.show, self._engine_info, self._features)
        self.refused: set[tuple[str, str]] = set()  # workspace settings refused (shown once each)
        self.user_options = self.options  # the user's own (initializationOptions): a workspace's are bounded by them

    def encoding(self) -> str:
        enc = self.workspace.position_encoding
        return str(getattr(enc, "value", enc) or "utf-16")

    def notify(self, method: str, params: dict[str, Any]) -> None:
        self.protocol.notify(method, params)

    def show(self, level: str, text: str) -> None:
        kind = {"error": t.MessageType.Error, "warning": t.MessageType.Warning}.get(level, t.MessageType.Info)
        self.window_show_message(t.ShowMessageParams(kind, text))

    def _engine_info(self) -> dict[str, Any]:
        return self.engine.info if self.engine is not None else {}

    def _features(self) -> dict[str, Any]:
        """What `llada/status` says the client may ask for beyond completions, and the engine's
        pace: "" (fast), "warming", "slow: 3.1 s/step" or "stuck: <why>" (llada_lsp.engines.pace)."""
        return {"nextEdit": self.next_edits is not None and self.next_edits.enabled,
                "pace": self.engine.pace.text if self.engine is not None and self.engine.ready else ""}

    def apply_workspace_options(self, settings: Any) -> None:
        """Settings from the workspace (`workspace/configuration`, `didChangeConfiguration`):
        machine-scoped keys (engine, engineToken, model, device) are refused; a refused value
        that differs from the one in use is reported once."""
        kept, refused = workspace_settings(settings)
        current = self.options.to_json()
        for key, value in refused.items():
            snake = next((k for k in current if k.replace("_", "") == key.replace("_", "").lower()), key)
            if value == current.get(snake) or (key, repr(value)) in self.refused:
                continue
            self.refused.add((key, repr(value)))
            log.warning("workspace setting %r ignored: machine-scoped, nested or a deadline of 0", key)
            why = ("a section nested in the section is not read" if key == "llada" else
                   "a workspace may not turn a deadline off (0)" if value == 0 else
                   "it can send your code or run programs")
            self.show("warning", f"llada: the workspace setting '{key}' is ignored: {why}, so only the editor's "
                      "user settings (initializationOptions) set it")
        self.apply_options(kept, from_workspace=True)

    def apply_options(self, *sources: dict[str, Any] | None, from_workspace: bool = False) -> None:
        """Options from `initializationOptions` (the user's own, kept in `user_options`), or
        from the workspace (`from_workspace`: bounded by the user's, `within_user`)."""
        try:
            opts, warnings = parse_options(*sources, base=self.options)
        except OptionsError as e:
            self.window_show_message(t.ShowMessageParams(t.MessageType.Error, f"llada: {e}"))
            return
        for w in warnings:
            log.warning("%s", w)
        self.options = within_user(opts, self.user_options) if from_workspace else opts
        if not from_workspace:
            self.user_options = opts
        self.store.max_bytes = opts.max_file_bytes
        if self.service is not None:
            self.service.options = opts
            self.service.cache.size = opts.cache_size
        if self.next_edits is not None:
            self.next_edits.options = opts
        if self.engine is not None:
            self.engine.set_deadlines(opts.engine_first_event_ms, opts.engine_timeout_ms)
        if self.service is not None:
            self.service.workspace.index.max_files = opts.workspace_index.max_files
            self.service.workspace.index.max_bytes = opts.workspace_index.max_bytes
            self.service.workspace.index.exclusions.set_user_globs(opts.exclude)

    def roots(self) -> list[str | None]:
        """The workspace folders as pygls keeps them; rootUri only when there are none (LSP:
        workspaceFolders take precedence, and a removed first folder is gone)."""
        folders = [f.uri for f in self.workspace.folders.values()]
        kept, refused = folder_uris(list(folders) if folders else [self.workspace.root_uri])
        for uri in refused:
            log.warning("workspace folder %r ignored: not an absolute file:// URI", uri[:200])
        return list(kept)

    def status(self, state: str, message: str = "") -> None:
        info = self.engine.info if self.engine is not None else {}
        self.notify("llada/status", {"state": state, "message": message, "engine": info, **self._features()})

    async def start_engine(self) -> None:
        o = self.options
        prompt: dict[str, Any] = {k: v for k, v in (("max_prompt_tokens", o.max_prompt_tokens),
                                    ("prompt_template", o.prompt_template)) if v}  # set ones only
        prompt |= {k: v for k, v in (("dtype", o.dtype), ("prompt_format", o.prompt_format)) if v != "auto"}
        if o.threads:
            prompt["threads"] = o.threads
        if o.engine == "sglang":
            prompt["sglang"] = o.sglang
        self.engine = (self.engine_factory or make_engine)(
            o.engine, model_dir=o.model, mode=o.mode, device=o.device, token=o.engine_token, **prompt)
        self.engine.set_deadlines(o.engine_first_event_ms, o.engine_timeout_ms)
        self.service = CompletionService(self.store, self.engine, o, self.notify, self.encoding)
        self.next_edits = NextEditService(self.store, self.engine, o, self.encoding)
        self.service.workspace.index.max_files = o.workspace_index.max_files
        self.service.workspace.index.max_bytes = o.workspace_index.max_bytes
        self.service.workspace.index.exclusions.set_user_globs(o.exclude)
        self.service.workspace.set_roots(self.roots())
        token: str | None = None
        caps = self.client_capabilities
        if caps.window is not None and caps.window.work_done_progress:
            token = "llada-model-load"
            try:
                await self.work_done_progress.create_async(token)
                self.work_done_progress.begin(token, t.WorkDoneProgressBegin(
                    title="llada: loading the model", percentage=0, cancellable=False))
            except Exception as e:  # noqa: BLE001 - progress is optional; loading goes on
                log.warning("work done progress refused: %s", e)
                token = None

        def progress(message: str, pct: int) -> None:
            log.info("engine: %s (%d%%)", message, pct)
            self.status("loading", message)
            if token is not None:
                self.work_done_progress.report(
                    token, t.WorkDoneProgressReport(message=message, percentage=pct))

        self.status("loading", "starting the engine")
        await self.engine.start(progress)
        if token is not None:
            self.work_done_progress.end(token, t.WorkDoneProgressEnd(
                message="ready" if self.engine.ready else f"failed: {self.engine.error}"))
        if self.engine.ready:
            self.status("ready", self.engine.pace.text)
        else:
            self.status("error", self.engine.error or "engine failed")
            self.engine_status.down = True  # shown here; its recovery is shown too
            self.window_show_message(t.ShowMessageParams(
                t.MessageType.Error, f"llada: the engine did not start: {self.engine.error}"))
        self.engine.on_state = self.engine_status.changed  # later losses and recoveries
        loop = asyncio.get_running_loop()
        engine = self.engine

        def paced(text: str) -> None:  # on any thread (the in-process engine's worker)
            if engine.ready:
                loop.call_soon_threadsafe(self.status, "ready", text)

        engine.pace.on_change = paced


server = LladaServer()


def build(engine_factory: Any = None) -> LladaServer:
    """A fresh server with every handler registered (`server` is the default instance)."""
    ls = LladaServer(engine_factory) if engine_factory is not None else server
    register(ls)
    return ls


def _answer_position(ls: LladaServer, uri: str, a: Answer) -> t.Position:
    doc = ls.store.get(uri)
    line, ch = doc.index.position(min(a.offset, len(doc.text)), ls.encoding())
    return t.Position(line, ch)


def register(ls: LladaServer) -> None:  # noqa: C901 - one small closure per LSP method
    @ls.feature(t.INITIALIZE)
    def initialize(ls: LladaServer, params: t.InitializeParams) -> None:
        ls.apply_options(params.initialization_options)

    @ls.feature(t.INITIALIZED)
    async def initialized(ls: LladaServer, params: t.InitializedParams) -> None:
        ws = ls.client_capabilities.workspace
        if ws is not None and ws.configuration:
            await _pull_configuration(ls)
        ls.start_task = asyncio.create_task(ls.start_engine())

    @ls.feature(t.WORKSPACE_DID_CHANGE_CONFIGURATION)
    def did_change_configuration(ls: LladaServer, params: t.DidChangeConfigurationParams
                                 ) -> None:
        """Pushed settings apply before the next message is handled; else pull them."""
        settings = params.settings if isinstance(params.settings, dict) else None
        if settings:
            ls.apply_workspace_options(settings)
        elif ls.client_capabilities.workspace and ls.client_capabilities.workspace.configuration:
            task = asyncio.ensure_future(_pull_configuration(ls))
            ls.background.add(task)
            task.add_done_callback(ls.background.discard)

    @ls.feature(t.WORKSPACE_DID_CHANGE_WORKSPACE_FOLDERS)
    def did_change_workspace_folders(ls: LladaServer, params: t.DidChangeWorkspaceFoldersParams) -> None:
        """pygls has updated its folders; the workspace index follows them."""
        if ls.service is not None:
            ls.service.workspace.set_roots(ls.roots())

    @ls.feature(t.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: LladaServer, params: t.DidOpenTextDocumentParams) -> None:
        d = params.text_document
        ls.store.open(d.uri, d.language_id, d.version, d.text)

    @ls.feature(t.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: LladaServer, params: t.DidChangeTextDocumentParams) -> None:
        d = params.text_document
        doc = ls.store.docs.get(d.uri)
        if doc is None:
            log.warning("didChange for unknown document %s ignored", d.uri)
            return
        if d.version is not None and d.version <= doc.version:
            log.warning("stale didChange for %s (version %s <= %s) applied", d.uri, d.version,
                        doc.version)
        if ls.next_edits is not None:
            ls.next_edits.document_changing(doc)  # the text before the edit: next-edit's base
        ls.store.change(d.uri, d.version, list(params.content_changes), ls.encoding())
        if ls.service is not None:
            ls.service.document_changed(d.uri, tuple(c.range.start.line for c in params.content_changes
                                                     if isinstance(c, t.TextDocumentContentChangePartial)))
        if ls.next_edits is not None:
            ls.next_edits.document_changed(d.uri)

    @ls.feature(t.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: LladaServer, params: t.DidCloseTextDocumentParams) -> None:
        ls.store.close(params.text_document.uri)
        if ls.service is not None:
            ls.service.document_closed(params.text_document.uri)
        if ls.next_edits is not None:
            ls.next_edits.document_closed(params.text_document.uri)

    @ls.feature(t.TEXT_DOCUMENT_INLINE_COMPLETION, t.InlineCompletionOptions())
    async def inline_completion(ls: LladaServer, params: t.InlineCompletionParams
                                ) -> t.InlineCompletionList:
        uri, pos = params.text_document.uri, params.position
        ctx = params.context
        invoked = ctx is not None and ctx.trigger_kind == t.InlineCompletionTriggerKind.Invoked
        info = ctx.selected_completion_info if ctx is not None else None
        sel = None if info is None else Selected(
            (info.range.start.line, info.range.start.character),
            (info.range.end.line, info.range.end.character), info.text)
        a = await _complete(ls, uri, pos, invoked, sel)
        if a is None:
            return t.InlineCompletionList(items=[])
        lead = ""
        if info is not None:  # extend the selected item and replace its range (LSP 3.18)
            rng, lead = info.range, info.text
        else:  # from the cursor over the rest of the line it replaces (llada_lsp.completion.line_rest)
            at = _answer_position(ls, uri, a)
            rng = t.Range(at, t.Position(at.line, at.character + units(a.rest, ls.encoding())))
        return t.InlineCompletionList(items=[
            t.InlineCompletionItem(insert_text=lead + fit(text, a.rest), range=rng, command=t.Command(
                title="Accept", command=ACCEPT_COMMAND, arguments=[a.completion_id, i]))
            for i, text in enumerate((a.text, *a.others)) if not only_deletes(text, a.rest)])

    @ls.feature(t.TEXT_DOCUMENT_COMPLETION, t.CompletionOptions(trigger_characters=[]))
    async def completion(ls: LladaServer, params: t.CompletionParams) -> t.CompletionList:
        uri, pos = params.text_document.uri, params.position
        a = await _complete(ls, uri, pos)
        if a is None:
            return t.CompletionList(is_incomplete=True, items=[])
        at = _answer_position(ls, uri, a)
        start = t.Position(at.line, max(0, at.character - units(a.word, ls.encoding())))
        items = []
        for i, text in enumerate((a.text, *a.others)):
            full = a.word + text
            items.append(t.CompletionItem(
                label=full.split("\n", 1)[0][:80] or full[:80], kind=t.CompletionItemKind.Text,
                detail="llada", filter_text=full, sort_text=f"{i:02d}",
                text_edit=t.TextEdit(t.Range(start, at), full),
                insert_text_format=t.InsertTextFormat.PlainText,
                command=t.Command(title="Accept", command=ACCEPT_COMMAND, arguments=[a.completion_id, i])))
        return t.CompletionList(is_incomplete=True, items=items)

    @ls.command(ACCEPT_COMMAND)
    def accept(ls: LladaServer, *args: Any) -> None:
        cid = _first_string(args)
        index = _first_int(args)
        log.info("accepted %s (candidate %d)", cid, index)
        if ls.service is not None:
            ls.service.accepted(cid or "", index)

    @ls.command(START_ENGINE_COMMAND)
    def start_engine_command(ls: LladaServer, *args: Any) -> bool:
        """The user asked for the engine: start it even after `llada-engine stop`."""
        return ls.engine is not None and ls.engine.start_explicitly()

    @ls.feature(DID_SHOW)
    def did_show(ls: LladaServer, params: Any) -> None:
        if ls.service is not None:
            ls.service.counters["shown"] += 1

    @ls.feature(DID_PARTIALLY_ACCEPT)
    def did_partially_accept(ls: LladaServer, params: Any) -> None:
        if ls.service is not None:
            ls.service.counters["partially_accepted"] += 1
            n = getattr(params, "acceptedLength", None) or getattr(params, "accepted_length", 0)
            ls.service.counters["partially_accepted_chars"] += int(n or 0)

    @ls.feature(NEXT_EDIT)
    async def next_edit(ls: LladaServer, params: Any) -> dict[str, Any]:
        """Next-edit suggestions after an edit (docs/lsp.md "Next-edit suggestions")."""
        try:
            p = next_edit_params(parse_params(params))
        except (NextEditParamsError, LimitError) as e:
            raise JsonRpcInvalidParams(str(e)) from e
        if ls.next_edits is None:  # not initialized yet: no result, not an error
            return {"version": p.version, "suggestions": [], "reason": "engine not started"}
        if ls.service is not None and ls.service.workspace.secret(p.uri):  # as completions: nothing is sent
            return {"version": p.version, "suggestions": [], "reason": "excluded: a secret file"}
        try:
            return (await ls.next_edits.suggest(p)).to_json()
        except (DocumentError, PositionError) as e:
            raise JsonRpcInvalidParams(str(e)) from e

    @ls.feature("llada/debugInfo")
    def debug_info(ls: LladaServer, params: Any) -> dict[str, Any]:
        base: dict[str, Any] = {"options": ls.options.to_json(), "encoding": ls.encoding(),
                                "documents": len(ls.store.docs),
                                "pendingHandlers": len(ls.protocol._request_futures)}
        if ls.service is not None:
            base.update(ls.service.debug_info())
        if ls.next_edits is not None:
            base["nextEdit"] = ls.next_edits.debug_info()
        return base

    @ls.feature(t.SHUTDOWN)
    async def shutdown(ls: LladaServer, params: Any) -> None:
        if ls.engine is not None:
            await ls.engine.close()


def _first_string(args: Any) -> str | None:
    """The completion id among a command's arguments (flat or as one list)."""
    for a in args:
        if isinstance(a, str):
            return a
        if isinstance(a, (list, tuple)):
            found = _first_string(a)
            if found is not None:
                return found
    return None


def _first_int(args: Any) -> int:
    """Which candidate was accepted: the first integer among the arguments (0 if none)."""
    for a in args:
        if isinstance(a, int) and not isinstance(a, bool):
            return a
        if isinstance(a, (list, tuple)):
            return _first_int(a)
    return 0


async def _pull_configuration(ls: LladaServer) -> None:
    try:
        result = await ls.workspace_configuration_async(t.ConfigurationParams(
            items=[t.ConfigurationItem(section="llada")]))
    except Exception as e:  # noqa: BLE001 - a client may refuse; defaults stay
        log.warning("workspace/configuration failed: %s", e)
        return
    if result and isinstance(result[0], dict):
        ls.apply_workspace_options(result[0])


async def _complete(ls: LladaServer, uri: str, pos: t.Position, invoked: bool = False,
                    selected: Selected | None = None) -> Answer | None:
    if ls.service is None:
        return None  # not initialized yet: no result, not an error
    try:
        return await ls.service.complete(uri, pos.line, pos.character, ARRIVAL.get(), invoked,
                                         selected)
    except (DocumentError, PositionError) as e:
        raise JsonRpcInvalidParams(str(e)) from e
