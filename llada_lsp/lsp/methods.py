"""Every LSP method the server answers, with its one thin handler, registered once.

The handlers live by concern: the session's (lifecycle, configuration, workspace folders,
documents' sync, `llada/debugInfo`, `llada.startEngine`) in `llada_lsp/lsp/session.py`, the
suggestions' (inline completion, completion, `llada.acceptCompletion`, the Copilot-style
shown and partially-accepted notifications, `llada/nextEdit`) in `llada_lsp/lsp/suggestions.py`.
The state they share is `LladaServer` (`llada_lsp/lsp/server.py`). A method's capability
options are given here, next to its handler, and nowhere else.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from lsprotocol import types as t

from llada_lsp.lsp import session, suggestions
from llada_lsp.lsp.protocol import DID_PARTIALLY_ACCEPT, DID_SHOW
from llada_lsp.lsp.server import LladaServer, server
from llada_lsp.nextedit.next_edit import METHOD as NEXT_EDIT

Handler = Callable[..., Any]

# method -> (its capability's options, or None; its handler), in the order they register
FEATURES: dict[str, tuple[Any, Handler]] = {
    t.INITIALIZE: (None, session.initialize),
    t.INITIALIZED: (None, session.initialized),
    t.WORKSPACE_DID_CHANGE_CONFIGURATION: (None, session.did_change_configuration),
    t.WORKSPACE_DID_CHANGE_WORKSPACE_FOLDERS: (None, session.did_change_workspace_folders),
    t.TEXT_DOCUMENT_DID_OPEN: (None, session.did_open),
    t.TEXT_DOCUMENT_DID_CHANGE: (None, session.did_change),
    t.TEXT_DOCUMENT_DID_CLOSE: (None, session.did_close),
    t.TEXT_DOCUMENT_INLINE_COMPLETION: (t.InlineCompletionOptions(), suggestions.inline_completion),
    t.TEXT_DOCUMENT_COMPLETION: (t.CompletionOptions(trigger_characters=[]), suggestions.completion),
    DID_SHOW: (None, suggestions.did_show),
    DID_PARTIALLY_ACCEPT: (None, suggestions.did_partially_accept),
    NEXT_EDIT: (None, suggestions.next_edit),
    session.DEBUG_INFO: (None, session.debug_info),
    t.SHUTDOWN: (None, session.shutdown),
}
# `workspace/executeCommand`'s commands (the server's capability lists them in this order)
COMMANDS: dict[str, Handler] = {
    suggestions.ACCEPT_COMMAND: suggestions.accept,
    session.START_ENGINE_COMMAND: session.start_engine,
}


def build(engine_factory: Any = None) -> LladaServer:
    """A fresh server with every handler registered (`server.server` is the default instance)."""
    ls = LladaServer(engine_factory) if engine_factory is not None else server
    register(ls)
    return ls


def register(ls: LladaServer) -> None:
    """Every method's handler on `ls`, with its capability's options."""
    for method, (options, handler) in FEATURES.items():
        ls.feature(method, options)(handler)
    for name, command in COMMANDS.items():
        ls.command(name)(command)
