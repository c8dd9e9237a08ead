"""The session's handlers, one thin function per LSP method (registered by `methods.register`):
the lifecycle (`initialize`, `initialized`, `shutdown`), the configuration
(`workspace/didChangeConfiguration`, pulled with `workspace/configuration`), the workspace
folders, the documents' sync (`didOpen`, `didChange`, `didClose`), and the custom
`llada/debugInfo` request and `llada.startEngine` command (docs/lsp.md). Each reads its
parameters and calls the server's state (`LladaServer`) or its services."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from lsprotocol import types as t

from llada_lsp.lsp.server import LladaServer

log = logging.getLogger(__name__)

START_ENGINE_COMMAND = "llada.startEngine"
DEBUG_INFO = "llada/debugInfo"


def initialize(ls: LladaServer, params: t.InitializeParams) -> None:
    ls.apply_options(params.initialization_options)


async def initialized(ls: LladaServer, params: t.InitializedParams) -> None:
    ws = ls.client_capabilities.workspace
    if ws is not None and ws.configuration:
        await _pull_configuration(ls)
    ls.start_task = asyncio.create_task(ls.start_engine())


def did_change_configuration(ls: LladaServer, params: t.DidChangeConfigurationParams) -> None:
    """Pushed settings apply before the next message is handled; else pull them."""
    settings = params.settings if isinstance(params.settings, dict) else None
    if settings:
        ls.apply_workspace_options(settings)
    elif ls.client_capabilities.workspace and ls.client_capabilities.workspace.configuration:
        task = asyncio.ensure_future(_pull_configuration(ls))
        ls.background.add(task)
        task.add_done_callback(ls.background.discard)


def did_change_workspace_folders(ls: LladaServer, params: t.DidChangeWorkspaceFoldersParams) -> None:
    """pygls has updated its folders; the workspace index follows them."""
    if ls.service is not None:
        ls.service.workspace.set_roots(ls.roots())


def did_open(ls: LladaServer, params: t.DidOpenTextDocumentParams) -> None:
    d = params.text_document
    doc = ls.store.open(d.uri, d.language_id, d.version, d.text)
    if ls.service is not None:
        ls.service.document_opened(doc)


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


def did_close(ls: LladaServer, params: t.DidCloseTextDocumentParams) -> None:
    ls.store.close(params.text_document.uri)
    if ls.service is not None:
        ls.service.document_closed(params.text_document.uri)
    if ls.next_edits is not None:
        ls.next_edits.document_closed(params.text_document.uri)


def debug_info(ls: LladaServer, params: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"options": ls.options.to_json(), "encoding": ls.encoding(),
                            "documents": len(ls.store.docs), "pendingHandlers": ls.pending_handlers()}
    if ls.service is not None:
        base.update(ls.service.debug_info())
    if ls.next_edits is not None:
        base["nextEdit"] = ls.next_edits.debug_info()
    return base


def start_engine(ls: LladaServer, *args: Any) -> bool:
    """The user asked for the engine: start it even after `llada-engine stop`."""
    return ls.engine is not None and ls.engine.start_explicitly()


async def shutdown(ls: LladaServer, params: Any) -> None:
    if ls.engine is not None:
        await ls.engine.close()


async def _pull_configuration(ls: LladaServer) -> None:
    try:
        result = await ls.workspace_configuration_async(t.ConfigurationParams(
            items=[t.ConfigurationItem(section="llada")]))
    except Exception as e:  # noqa: BLE001 - a client may refuse; defaults stay
        log.warning("workspace/configuration failed: %s", e)
        return
    if result and isinstance(result[0], dict):
        ls.apply_workspace_options(result[0])
