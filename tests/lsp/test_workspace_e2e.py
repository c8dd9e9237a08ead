"""Workspace context end to end: the real server over stdio with two open documents; a
completion in one carries the definition from the other (seen in llada/debugInfo), the
chunk set holds while typing, and the `workspaceContext` option turns it off."""

from __future__ import annotations

from typing import Any

import pytest
from lsp_helpers import DATA, debug_info, inline, needs_model, open_doc, session_fixture
from lsprotocol import types as t

from llada_lsp.client import insert

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
