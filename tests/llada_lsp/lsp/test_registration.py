"""One thin handler per LSP method, registered once (issue 53): each method the server answers
has a module-level function of the handlers' modules (`llada_lsp/lsp/session.py`,
`suggestions.py`), a few lines long, and not a closure nested in a `register` function; and the
real server's capabilities, over stdio, still name every method with the options it had
before the handlers moved (the completion's empty trigger characters, the inline completion,
the two commands, next edits as an experimental capability, incremental sync)."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from llada_lsp.lsp.methods import build
from tests.fakes.raw_lsp import INIT, msg, request, spawn, stop

METHODS = {
    "initialize", "initialized", "shutdown", "workspace/didChangeConfiguration",
    "workspace/didChangeWorkspaceFolders", "textDocument/didOpen", "textDocument/didChange",
    "textDocument/didClose", "textDocument/inlineCompletion", "textDocument/completion",
    "textDocument/didShowCompletion", "textDocument/didPartiallyAcceptCompletion",
    "llada/nextEdit", "llada/debugInfo",
}
COMMANDS = ["llada.acceptCompletion", "llada.startEngine"]
HANDLER_MODULES = {"llada_lsp.lsp.session", "llada_lsp.lsp.suggestions"}
THIN = 20  # lines a handler may take, its signature and docstring included


def _function(registered: Any) -> Any:
    """The handler pygls wraps (a partial or a coroutine wrapper binding the server)."""
    return getattr(registered, "func", registered)


def test_each_method_has_one_thin_module_level_handler() -> None:
    ls = build(engine_factory=lambda *a, **k: None)  # a fresh server, not the default instance
    features, commands = ls.protocol.fm.features, ls.protocol.fm.commands
    assert set(features) == METHODS and list(commands) == COMMANDS
    handlers = {m: _function(h) for m, h in [*features.items(), *commands.items()]}
    for method, f in handlers.items():
        assert "<locals>" not in f.__qualname__ and f.__module__ in HANDLER_MODULES, (method, f.__qualname__)
        assert len(inspect.getsourcelines(f)[0]) <= THIN, method
    assert len({id(f) for f in handlers.values()}) == len(handlers)  # one each


@pytest.mark.asyncio
async def test_the_capabilities_name_every_method_as_before() -> None:
    r = await spawn()
    try:
        await r.write(msg(request(1, "initialize", {**INIT, "capabilities": {
            "general": {"positionEncodings": ["utf-8", "utf-16"]}}})))
        caps = (await r.answer(1, 60))["result"]["capabilities"]
    finally:
        await stop(r)
    assert caps["positionEncoding"] == "utf-8"
    assert caps["textDocumentSync"]["change"] == 2 and caps["textDocumentSync"]["openClose"] is True
    assert caps["completionProvider"] == {"triggerCharacters": []}
    assert caps["inlineCompletionProvider"] == {}
    assert caps["executeCommandProvider"] == {"commands": COMMANDS}
    assert caps["experimental"] == {"llada": {"nextEdit": True}}
    assert caps["workspace"]["workspaceFolders"]["supported"] is True
