"""The server's JSON-RPC protocol: position-encoding negotiation, the lifecycle gate, the
arrival time of each message, and three fixes to pygls (no second copy of the documents; no
leaked futures; plain JSON results encoded without the converter's walk)."""

from __future__ import annotations

import time
from contextvars import ContextVar
from typing import Any

from lsprotocol import types as t
from pygls.protocol import LanguageServerProtocol, lsp_method
from pygls.protocol.json_rpc import JsonRPCResponseMessage

from llada_lsp.lsp.stdio import Lifecycle
from llada_lsp.nextedit.next_edit import METHOD as NEXT_EDIT

DID_SHOW = "textDocument/didShowCompletion"
DID_PARTIALLY_ACCEPT = "textDocument/didPartiallyAcceptCompletion"


# When the message being handled arrived (handlers run in a copy of the context): a
# completion's overhead is counted from here, so it includes the event loop's queueing.
ARRIVAL: ContextVar[float | None] = ContextVar("llada_arrival", default=None)


class LladaProtocol(LanguageServerProtocol):
    """Negotiates UTF-8 positions whenever the client offers them (else UTF-16); enforces
    the lifecycle (`Lifecycle` in llada_lsp/lsp/stdio.py); keeps no copy of the documents (the store does)."""

    # the notifications among the methods lsprotocol does not know (LSP 3.18's): one sent
    # with an id is refused (stdio.is_notification_method)
    notifications: frozenset[str] = frozenset({DID_SHOW, DID_PARTIALLY_ACCEPT})

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lifecycle = Lifecycle()

    def handle_message(self, message: Any) -> Any:
        ARRIVAL.set(time.perf_counter())
        method = getattr(message, "method", None)
        msg_id = getattr(message, "id", None)
        is_request = method is not None and msg_id is not None
        refusal = self.lifecycle.admit(method, is_request)
        if refusal is not None:
            if msg_id is not None and method is not None:
                self._send_response(msg_id, error=refusal.to_response_error())
            return None
        return super().handle_message(message)

    # pygls keeps its own copy of each document and splits the whole text into lines on
    # every change (~10 ms a keystroke in a 50k-line file); the server never reads it.
    @lsp_method(t.TEXT_DOCUMENT_DID_OPEN)
    def lsp_text_document__did_open(self, params: t.DidOpenTextDocumentParams) -> Any:
        if (handler := self.fm.features.get(t.TEXT_DOCUMENT_DID_OPEN)) is not None:
            yield handler, (params,), None

    @lsp_method(t.TEXT_DOCUMENT_DID_CHANGE)
    def lsp_text_document__did_change(self, params: t.DidChangeTextDocumentParams) -> Any:
        if (handler := self.fm.features.get(t.TEXT_DOCUMENT_DID_CHANGE)) is not None:
            yield handler, (params,), None

    @lsp_method(t.TEXT_DOCUMENT_DID_CLOSE)
    def lsp_text_document__did_close(self, params: t.DidCloseTextDocumentParams) -> Any:
        if (handler := self.fm.features.get(t.TEXT_DOCUMENT_DID_CLOSE)) is not None:
            yield handler, (params,), None

    def _execute_handler(self, msg_id: Any, handler: Any, callback: Any, args: Any = None,
                         kwargs: Any = None) -> None:
        """pygls 2.1 files the future of every generator or coroutine handler under its message
        id but pops it only when it answers a request: the future of each notification
        (didChange: every keystroke) and of each step of a generator handler stayed forever
        (~1 KB a keystroke; bench/soak.py). Forget it once done."""
        super()._execute_handler(msg_id, handler, callback, args, kwargs)
        fut = self._request_futures.get(msg_id)
        if fut is not None:
            fut.add_done_callback(lambda f: self._forget_future(msg_id, f))

    def _serialize_message(self, data: Any) -> Any:
        """pygls' `json.dumps` default: a generic response (a `llada/*` method's) whose result is
        a plain dict goes to the encoder as it is. The converter's walk of it (cattrs, a Python
        call per value) held the event loop ~200 ms for a next-edit answer of 999 suggestions
        (bench/next_edit_load.py `answer`); the C encoder takes a few ms, and calls this again
        for any object inside that is not plain JSON."""
        if type(data) is JsonRPCResponseMessage and isinstance(data.result, dict):
            return {"id": data.id, "jsonrpc": data.jsonrpc, "result": data.result}
        return super()._serialize_message(data)

    def pending(self) -> int:
        """The futures of the handlers still held: those not done (a leak would show here)."""
        return len(self._request_futures)

    def _forget_future(self, msg_id: Any, fut: Any) -> None:
        if self._request_futures.get(msg_id) is fut:
            del self._request_futures[msg_id]

    @lsp_method(t.INITIALIZE)
    def lsp_initialize(self, params: t.InitializeParams) -> Any:
        general = params.capabilities.general
        if general is not None and general.position_encodings:
            offered = list(general.position_encodings)
            if t.PositionEncodingKind.Utf8 in offered:
                general.position_encodings = [t.PositionEncodingKind.Utf8]
            elif t.PositionEncodingKind.Utf16 in offered or not offered:
                general.position_encodings = [t.PositionEncodingKind.Utf16]
        result = yield from super().lsp_initialize(params)
        if NEXT_EDIT in self.fm.features:  # the engine's support comes with llada/status (nextEdit)
            result.capabilities.experimental = {"llada": {"nextEdit": True}}
        return result
