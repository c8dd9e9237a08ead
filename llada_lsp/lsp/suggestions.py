"""The suggestions' handlers, one thin function per LSP method (registered by
`methods.register`): `textDocument/inlineCompletion` and `textDocument/completion` (both ask
`CompletionService.complete`), the `llada.acceptCompletion` command, the Copilot-style
`textDocument/didShowCompletion` and `didPartiallyAcceptCompletion` notifications, and the
custom `llada/nextEdit` request (`NextEditService.suggest`; docs/lsp.md). A position past the
document's end, or a document never opened, is answered Invalid Params; before the engine
started, an empty answer."""

from __future__ import annotations

import logging
from typing import Any

from lsprotocol import types as t
from pygls.exceptions import JsonRpcInvalidParams

from llada_lsp.completion.answers import Selected
from llada_lsp.completion.completions import Answer
from llada_lsp.completion.line_rest import fit, only_deletes
from llada_lsp.lsp.limits import LimitError, next_edit_params
from llada_lsp.lsp.protocol import ARRIVAL
from llada_lsp.lsp.server import LladaServer
from llada_lsp.nextedit.next_edit import NextEditParamsError, parse_params
from llada_lsp.text.documents import DocumentError
from llada_lsp.text.positions import PositionError, units

log = logging.getLogger(__name__)

ACCEPT_COMMAND = "llada.acceptCompletion"


async def inline_completion(ls: LladaServer, params: t.InlineCompletionParams) -> t.InlineCompletionList:
    uri, ctx = params.text_document.uri, params.context
    invoked = ctx is not None and ctx.trigger_kind == t.InlineCompletionTriggerKind.Invoked
    info = ctx.selected_completion_info if ctx is not None else None
    sel = None if info is None else Selected(
        (info.range.start.line, info.range.start.character),
        (info.range.end.line, info.range.end.character), info.text)
    a = await _complete(ls, uri, params.position, invoked, sel)
    return t.InlineCompletionList(items=[] if a is None else _inline_items(ls, uri, a, info))


async def completion(ls: LladaServer, params: t.CompletionParams) -> t.CompletionList:
    uri = params.text_document.uri
    a = await _complete(ls, uri, params.position)
    return t.CompletionList(is_incomplete=True, items=[] if a is None else _completion_items(ls, uri, a))


def accept(ls: LladaServer, *args: Any) -> None:
    cid = _first_string(args)
    index = _first_int(args)
    log.info("accepted %s (candidate %d)", cid, index)
    if ls.service is not None:
        ls.service.accepted(cid or "", index)


def did_show(ls: LladaServer, params: Any) -> None:
    if ls.service is not None:
        ls.service.counters["shown"] += 1


def did_partially_accept(ls: LladaServer, params: Any) -> None:
    if ls.service is not None:
        ls.service.counters["partially_accepted"] += 1
        n = getattr(params, "acceptedLength", None) or getattr(params, "accepted_length", 0)
        ls.service.counters["partially_accepted_chars"] += int(n or 0)


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


async def _complete(ls: LladaServer, uri: str, pos: t.Position, invoked: bool = False,
                    selected: Selected | None = None) -> Answer | None:
    if ls.service is None:
        return None  # not initialized yet: no result, not an error
    try:
        return await ls.service.complete(uri, pos.line, pos.character, ARRIVAL.get(), invoked,
                                         selected)
    except (DocumentError, PositionError) as e:
        raise JsonRpcInvalidParams(str(e)) from e


def _inline_items(ls: LladaServer, uri: str, a: Answer,
                  info: t.SelectedCompletionInfo | None) -> list[t.InlineCompletionItem]:
    """The answer's candidates as ghost text: each extends the selected item and replaces its
    range (LSP 3.18), or replaces the rest of the line from the cursor (completion/line_rest.py)."""
    lead = ""
    if info is not None:
        rng, lead = info.range, info.text
    else:
        at = _answer_position(ls, uri, a)
        rng = t.Range(at, t.Position(at.line, at.character + units(a.rest, ls.encoding())))
    return [t.InlineCompletionItem(insert_text=lead + fit(text, a.rest), range=rng, command=t.Command(
                title="Accept", command=ACCEPT_COMMAND, arguments=[a.completion_id, i]))
            for i, text in enumerate((a.text, *a.others)) if not only_deletes(text, a.rest)]


def _completion_items(ls: LladaServer, uri: str, a: Answer) -> list[t.CompletionItem]:
    """The answer's candidates as completion items, each replacing the word before the cursor."""
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
    return items


def _answer_position(ls: LladaServer, uri: str, a: Answer) -> t.Position:
    doc = ls.store.get(uri)
    line, ch = doc.index.position(min(a.offset, len(doc.text)), ls.encoding())
    return t.Position(line, ch)


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
