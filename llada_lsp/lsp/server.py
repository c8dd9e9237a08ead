"""The language server's state: the options (the user's and the workspace's), the document
store, the engine client and the services that use it, and the engine's start.

One thin handler per LSP method reads and calls it: the session's (lifecycle, configuration,
workspace folders, documents' sync, `llada/debugInfo`) in `llada_lsp/lsp/session.py`, the
suggestions' (completions, the accept command, `llada/nextEdit`) in
`llada_lsp/lsp/suggestions.py`; `llada_lsp/lsp/methods.py` registers each once. Custom messages
(docs/lsp.md): notifications `llada/refine`, `llada/stats`, `llada/status` from the server; the
requests `llada/nextEdit` and `llada/debugInfo` and the commands `llada.acceptCompletion` and
`llada.startEngine` from the client; `textDocument/didShowCompletion` and
`textDocument/didPartiallyAcceptCompletion` (Copilot protocol style) are accepted.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from lsprotocol import types as t
from pygls.lsp.server import LanguageServer

from llada_lsp import __version__
from llada_lsp.completion.completions import CompletionService
from llada_lsp.completion.reporting import EngineStatus
from llada_lsp.engines.engine_client import EngineClient, make_engine
from llada_lsp.lsp.limits import folder_uris
from llada_lsp.lsp.protocol import LladaProtocol
from llada_lsp.nextedit.next_edit import NextEditService
from llada_lsp.options import (
    Options,
    OptionsError,
    parse_options,
    within_user,
    workspace_settings,
)
from llada_lsp.text.documents import DocumentStore

log = logging.getLogger(__name__)


class LladaServer(LanguageServer):
    """One editor's session: `options` in force (the workspace's bounded by `user_options`),
    the open documents, and, once the engine starts, its client and the two services."""

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

    def pending_handlers(self) -> int:
        """The handlers' futures the protocol still holds (llada/debugInfo's `pendingHandlers`)."""
        return self.protocol.pending() if isinstance(self.protocol, LladaProtocol) else 0

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
        for doc in list(self.store.docs.values()):  # opened before the service existed
            self.service.document_opened(doc)
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
