"""Bad input over stdio: clear errors or empty results, and the server keeps serving.

This module's client offers UTF-8 positions, so it also checks the negotiation.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from lsprotocol import types as t
from pygls.exceptions import JsonRpcInvalidParams

from tests.llada_lsp.lsp_helpers import (
    DATA,
    debug_info,
    inline,
    needs_model,
    open_doc,
    poll,
    session_fixture,
)

pytestmark = [pytest.mark.asyncio(loop_scope="module"), needs_model]


client = session_fixture({"maxTokens": {"line": 8, "statements": 8, "block": 8}}, encodings=["utf-16", "utf-8"])


def _items(res: Any) -> list[Any]:
    return list(res.items) if res is not None else []


async def test_utf8_negotiated_and_used(client: Any) -> None:
    assert client.init_result.capabilities.position_encoding == "utf-8"
    assert (await debug_info(client))["encoding"] == "utf-8"
    text = 's = "héllo😀"\nt = s.upper()\n'
    uri = open_doc(client, DATA / "u8.py", "python", text=text)
    # line 0 is 16 bytes long in UTF-8 (é: 2, 😀: 4): the end of the line is valid...
    res = await inline(client, uri, t.Position(0, 16))
    assert isinstance(res, t.InlineCompletionList)
    info = await debug_info(client)
    assert info["lastPlan"]["kind"] == "line"
    # ...and one byte past it is an error
    with pytest.raises(JsonRpcInvalidParams, match="past the end"):
        await inline(client, uri, t.Position(0, 17))


async def test_unknown_uri_is_a_clear_error(client: Any) -> None:
    with pytest.raises(JsonRpcInvalidParams, match="unknown document"):
        await inline(client, "file:///nowhere/missing.py", t.Position(0, 0))


async def test_position_past_the_end(client: Any) -> None:
    uri = open_doc(client, DATA / "short.py", "python", text="x = 1\n")
    with pytest.raises(JsonRpcInvalidParams, match="past the end"):
        await inline(client, uri, t.Position(40, 0))
    with pytest.raises(JsonRpcInvalidParams, match="past the end"):
        await inline(client, uri, t.Position(0, 99))


async def test_huge_file_gets_empty_result(client: Any) -> None:
    body = "def f(x):\n    return x + 1\n\n" * (5_000_000 // 28)
    uri = open_doc(client, DATA / "huge.py", "python", text=body)
    res = await inline(client, uri, t.Position(3, 4))
    assert _items(res) == []
    # an edit to it still works and is still answered
    client.text_document_did_change(t.DidChangeTextDocumentParams(
        t.VersionedTextDocumentIdentifier(version=2, uri=uri),
        [t.TextDocumentContentChangePartial(range=t.Range(t.Position(0, 0), t.Position(0, 0)),
                                            text="# big\n")]))
    assert _items(await inline(client, uri, t.Position(1, 0))) == []


async def test_binary_bytes_get_empty_result(client: Any) -> None:
    uri = open_doc(client, DATA / "blob.py", "python",
                   text="\x00\x01\x02ELF\x00" * 100 + "\nx = ")
    assert _items(await inline(client, uri, t.Position(1, 4))) == []


async def test_unknown_language_falls_back_to_indentation(client: Any) -> None:
    uri = open_doc(client, DATA / "prog.cbl", "cobol",
                   text="PROCEDURE DIVISION.\n    DISPLAY 'HI'.\n    \n    STOP RUN.\n")
    res = await inline(client, uri, t.Position(2, 4))
    assert isinstance(res, t.InlineCompletionList)
    assert (await debug_info(client))["lastPlan"]["kind"] == "statements"


async def test_disabled_language_and_stale_change(client: Any) -> None:
    uri = open_doc(client, DATA / "stale.py", "python", text="def f():\n    return 1\n")
    # a didChange with an older version is logged and applied; the server keeps serving
    client.text_document_did_change(t.DidChangeTextDocumentParams(
        t.VersionedTextDocumentIdentifier(version=0, uri=uri),
        [t.TextDocumentContentChangePartial(range=t.Range(t.Position(2, 0), t.Position(2, 0)),
                                            text="x = ")]))
    client.text_document_did_change(t.DidChangeTextDocumentParams(
        t.VersionedTextDocumentIdentifier(version=5, uri="file:///never/opened.py"),
        [t.TextDocumentContentChangePartial(range=t.Range(t.Position(0, 0), t.Position(0, 0)),
                                            text="y")]))
    res = await inline(client, uri, t.Position(2, 4))
    assert isinstance(res, t.InlineCompletionList)
    client.workspace_did_change_configuration(t.DidChangeConfigurationParams(
        settings={"llada": {"languages": ["rust"]}}))
    info = await debug_info(client)
    assert info["options"]["languages"] == ["rust"]
    assert _items(await inline(client, uri, t.Position(2, 4))) == []
    client.workspace_did_change_configuration(t.DidChangeConfigurationParams(
        settings={"llada": {"mode": "nonsense"}}))  # rejected with a message, old options kept
    info = await debug_info(client)
    assert info["options"]["mode"] == "speedy" and info["documents"] >= 1


async def test_a_same_version_change_while_drafting_gives_empty(client: Any) -> None:
    """The client changed the text without a new version while the draft was computed:
    the staleness check compares the content's revision, not only the version."""
    client.workspace_did_change_configuration(t.DidChangeConfigurationParams(
        settings={"llada": {"languages": ["*"]}}))
    text = "# same-version test: not in the cache\nimport os\n\n\ndef walk(root):\n    \n"
    uri = open_doc(client, DATA / "samever.py", "python", text=text)
    before = (await debug_info(client))["engine"]["engine_calls"]
    task = asyncio.ensure_future(inline(client, uri, t.Position(5, 4)))

    async def started() -> bool:
        return (await debug_info(client))["engine"]["engine_calls"] > before

    await poll(started, 30)
    client.text_document_did_change(t.DidChangeTextDocumentParams(
        t.VersionedTextDocumentIdentifier(version=1, uri=uri),  # the version it was opened with
        [t.TextDocumentContentChangeWholeDocument(text=text.replace("walk", "visit"))]))
    assert _items(await task) == []
    info = await debug_info(client)
    assert any("changed while drafting" in r["reason"] for r in info["emptyReasons"]), \
        info["emptyReasons"]
