"""Workspace context end to end: the real server over stdio with two open documents; a
completion in one carries the definition from the other (seen in llada/debugInfo), the
chunk set holds while typing, and the `workspaceContext` option turns it off."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from lsprotocol import types as t

from llada_lsp.client import insert
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

client = session_fixture({"maxTokens": {"line": 8, "statements": 8, "block": 8}})

GEOMETRY = '''import math


def distance(a, b):
    return math.hypot(a[0] - b[0], a[1] - b[1])


def midpoint(a, b):
    return ((a[0] + b[0]) / 2, (a[1] + b[1]) / 2)
'''
MAIN = "from ws_geometry import distance\n\n\ndef report(points):\n    d = distance(points[0], points[1])\n    "


async def test_definition_from_the_other_open_document(client: Any) -> None:
    open_doc(client, DATA / "ws_geometry.py", "python", GEOMETRY)
    uri = open_doc(client, DATA / "ws_main.py", "python", MAIN)
    line = MAIN.count("\n")
    await inline(client, uri, t.Position(line, 4))
    info = await debug_info(client)
    ctx = info["workspaceContext"]
    assert info["lastPlan"]["uri"] == uri and info["lastPlan"]["kind"] != "none", info["lastPlan"]
    assert ctx["uri"] == uri and ctx["paths"][:1] == ["ws_geometry.py"], ctx  # relative to the root
    assert ctx["tokens"] > 0 and ctx["builds"] == 1
    assert info["options"]["workspace_context"] is True and info["options"]["context_tokens"] == 1024

    # typing on: the same chunks, not built again
    for k, ch in enumerate("ret"):
        insert(client, uri, 2 + k, line, 4 + k, ch)
        await inline(client, uri, t.Position(line, 5 + k))
    info = await debug_info(client)
    assert info["workspaceContext"]["paths"] == ctx["paths"] and info["workspaceContext"]["builds"] == 1

    # off: no context (a line no suggestion can type through, so the engine is asked)
    submitted = info["engine"]["submitted"]
    client.workspace_did_change_configuration(t.DidChangeConfigurationParams(
        settings={"llada": {"workspaceContext": False}}))
    insert(client, uri, 5, line, 7, "\n    zq = 0\n    ")
    await inline(client, uri, t.Position(line + 2, 4))
    info = await debug_info(client)
    assert info["options"]["workspace_context"] is False
    assert info["engine"]["submitted"] > submitted
    assert info["workspaceContext"]["paths"] == [], info["workspaceContext"]


async def test_a_folder_added_later_is_indexed(client: Any, tmp_path: Path) -> None:
    """workspace/didChangeWorkspaceFolders: the index follows the new folder (scanned in the
    background), and a completion there gets the definition from a file on disk."""
    folder = tmp_path / "later"
    folder.mkdir()
    (folder / "scaling.py").write_text(
        "def rescale_points(points, factor):\n    return [(x * factor, y * factor) for x, y in points]\n")
    client.workspace_did_change_workspace_folders(t.DidChangeWorkspaceFoldersParams(
        event=t.WorkspaceFoldersChangeEvent(added=[t.WorkspaceFolder(uri=folder.as_uri(), name="later")],
                                            removed=[])))
    client.workspace_did_change_configuration(t.DidChangeConfigurationParams(
        settings={"llada": {"workspaceContext": True}}))
    text = "from scaling import rescale_points\n\n\ndef grow(points):\n    return rescale_points("
    uri = open_doc(client, folder / "grow.py", "python", text)
    line, col = text.count("\n"), len(text.split("\n")[-1])
    typed = iter(range(1, 200))

    async def context_paths() -> list[str] | None:
        k = next(typed)  # a new prefix each time, so the engine (not the cache) is asked
        insert(client, uri, 1 + k, line, col + k - 1, "p" if k == 1 else "o")
        await inline(client, uri, t.Position(line, col + k))
        paths = (await debug_info(client))["workspaceContext"]["paths"]
        return paths if "scaling.py" in paths else None

    paths = await poll(context_paths, timeout=60)
    assert paths[0] == "scaling.py"  # relative to the new folder
    info = await debug_info(client)
    assert info["workspaceContext"]["indexedFiles"] == 1  # the session root's files are gone
