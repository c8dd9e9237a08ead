"""Work per keystroke does not grow with the file: the context walk descends from the cursor,
and the server keeps no second copy of the text (the line index and the tree edited in place:
tests/llada_lsp/text/test_text.py). Work is counted (index rebuilds, tree nodes
touched), never timed; the timings are in `bench/lsp_latency.py --big-file`.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import tree_sitter as ts

from llada_lsp.completion.context import MAX_TOP_NODES, _boundaries_from_tree, trim_context
from llada_lsp.text.documents import Document
from llada_lsp.text.syntax import ancestors, node_at
from tests.fakes.raw_lsp import Raw, initialized, msg, notification, request, stop

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from bench.keystroke_cost import python_file  # noqa: E402

BIG = python_file(50_000)
CURSOR = BIG.index("        total += k * b\n", len(BIG) // 2) + len("        total += k * b\n")


class Counting:
    """A tree-sitter object whose every Node handed out is counted."""

    def __init__(self, obj: Any, seen: list[int]) -> None:
        self._obj, self._seen = obj, seen

    def _wrap(self, v: Any) -> Any:
        if isinstance(v, ts.Node):
            self._seen[0] += 1
            return Counting(v, self._seen)
        if isinstance(v, ts.TreeCursor):
            return Counting(v, self._seen)
        if isinstance(v, list):
            return [self._wrap(x) for x in v]
        return v

    def __getattr__(self, name: str) -> Any:
        v = getattr(self._obj, name)
        if callable(v):
            return lambda *a, **k: self._wrap(v(*a, **k))
        return self._wrap(v)


def test_the_context_walk_touches_only_nodes_near_the_cursor() -> None:
    doc = Document("file:///big.py", "python", 1, BIG, 10**7)
    tree = doc.syntax_tree()
    assert tree.root_node.child_count > 5000
    seen = [0]
    ctx = trim_context(doc.text, CURSOR, index=doc.index, tree=Counting(tree, seen))
    # a bound that does not grow with the file (the imports scan stops after MAX_TOP_NODES
    # top-level nodes); walking the top level touched > 5,000 nodes
    assert 0 < seen[0] < MAX_TOP_NODES + 200, seen
    assert ctx == trim_context(doc.text, CURSOR, index=doc.index, tree=tree)
    assert ctx.kept.startswith("import os\nimport sys\n")


@pytest.mark.parametrize("cursor", [CURSOR, 5, len(BIG) // 3, len(BIG)])
def test_the_boundaries_are_those_of_a_walk_over_every_child(cursor: int) -> None:
    doc = Document("file:///big.py", "python", 1, BIG, 10**7)
    tree, index = doc.syntax_tree(), doc.index
    limit = max(0, cursor - 2400)
    rows = set()
    node = node_at(tree, BIG, cursor)
    for anc in [node, *ancestors(node)]:
        for child in anc.named_children:
            rows.update((child.start_point[0], child.end_point[0] + 1))
    every = sorted(index.start(r) for r in rows if r < index.line_count)
    near = _boundaries_from_tree(tree, BIG, cursor, index, limit)
    assert [b for b in near if limit <= b <= cursor] == [b for b in every if limit <= b <= cursor]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def server() -> AsyncIterator[Raw]:
    r = await initialized()
    await r.write(msg(request(2, "llada/debugInfo", {})))
    await r.answer(2)
    yield r
    await stop(r)


@pytest.mark.asyncio(loop_scope="module")
async def test_typing_into_a_50k_line_file_over_stdio(server: Raw) -> None:
    uri = "file:///big/typed.py"
    await server.write(msg(notification("textDocument/didOpen", {"textDocument": {
        "uri": uri, "languageId": "python", "version": 1, "text": BIG}})))
    line = BIG.count("\n", 0, CURSOR)
    for k, ch in enumerate("    zz = total"):
        pos = {"line": line, "character": k}
        await server.write(msg(notification("textDocument/didChange", {
            "textDocument": {"uri": uri, "version": k + 2},
            "contentChanges": [{"range": {"start": pos, "end": pos}, "text": ch}]})))
        await server.write(msg(request(100 + k, "textDocument/inlineCompletion", {
            "textDocument": {"uri": uri}, "position": {"line": line, "character": k + 1},
            "context": {"triggerKind": 2}})))
        assert (await server.answer(100 + k))["result"] == {"items": []}
    await server.write(msg(request(200, "llada/debugInfo", {})))
    info = (await server.answer(200))["result"]
    assert info["lastPlan"]["uri"] == uri and info["lastPlan"]["kind"] != "none", info["lastPlan"]
    assert info["emptyReasons"][0]["reason"].startswith("engine"), info["emptyReasons"]
