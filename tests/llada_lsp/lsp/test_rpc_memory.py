"""The server keeps no bookkeeping per handled message: pygls 2.1 filed the future of each
generator or coroutine handler (didChange: every keystroke) under its message id and kept it
forever, so a long typing session grew the server's memory (~1 KB a keystroke, found by
bench/soak.py). Only running handlers may be pending."""

from __future__ import annotations

import pytest
from lsprotocol import types as t

from tests.llada_lsp.lsp_helpers import (
    DATA,
    debug_info,
    inline,
    needs_model,
    open_doc,
    position_of,
    server_session,
)

KEYS = 300


@needs_model
@pytest.mark.asyncio(loop_scope="function")
async def test_handled_messages_leave_nothing_pending() -> None:
    async with server_session({"speculative": False, "maxTokens": {"line": 4, "statements": 4, "block": 4}}) as client:
        text = (DATA / "shapes.py.txt").read_text()
        uri = open_doc(client, "shapes.py.txt", "python", uri=(DATA / "rpc_memory.py").as_uri())
        pos = position_of(text, "        b = ")
        for k in range(KEYS):  # keystrokes, and a request now and then
            client.text_document_did_change(t.DidChangeTextDocumentParams(
                t.VersionedTextDocumentIdentifier(version=k + 2, uri=uri),
                [t.TextDocumentContentChangePartial(range=t.Range(pos, pos), text="x")]))
            pos = t.Position(pos.line, pos.character + 1)
            if k % 50 == 0:
                await inline(client, uri, pos)
        info = await debug_info(client)
        assert info["pendingHandlers"] <= 2, info["pendingHandlers"]  # the debugInfo request itself
