"""LLaDA2.2's insert/delete edits reach the editor: through the real language server over stdio
and its in-process engine, a completion on the tiny LLaDA2.2 chat fixture (its head biased so
the model emits DELETE and INSERT) streams `llada/refine` edits among which at least one is a
pure insertion (an empty range, new text) and one a pure deletion (a range, no text), applied
in order to the shown suggestion they give each refinement's text; and no edit token or mask
ever shows."""

from __future__ import annotations

from pathlib import Path

import pytest

from llada_lsp.client import apply_lsp_edits
from tests.engine.model.adapters.tiny_llada22 import (
    CHAT_DELETE,
    CHAT_SPLIT,
    edit_head_rows,
    write_llada22_chat,
)
from tests.llada_lsp.lsp_helpers import (
    completion_id,
    debug_info,
    final_refine,
    first_text,
    inline,
    open_doc,
    position_of,
    server_session,
)

TEXT = "def area(w, h):\n    s = w * h\n    return \n"
# DELETE and INSERT get 1.05 times the head rows of tokens 68 and 77 (they lead wherever those
# lead): rows chosen on this fixture, decoded by Speedy (the published rule: edit threshold 0),
# so that both kinds of edit reach the editor (the test asserts it). [MASK] keeps its row.
BIAS = {CHAT_DELETE: (68, 1.05), CHAT_SPLIT: (77, 1.05)}


@pytest.mark.asyncio(loop_scope="function")
async def test_refinements_insert_and_delete_in_the_editor(tmp_path: Path) -> None:
    ckpt = edit_head_rows(write_llada22_chat(tmp_path / "llada22-chat"), BIAS)
    init = {"model": str(ckpt), "speculative": False, "syntaxCheck": False, "rescueAlternatives": 0,
            "mode": "speedy", "maxTokens": {"line": 24, "statements": 24, "block": 24}}
    async with server_session(init) as client:
        info = (await debug_info(client))["engineInfo"]
        assert info["family"] == "llada2"
        uri = open_doc(client, tmp_path / "area.py", "python", text=TEXT)
        res = await inline(client, uri, position_of(TEXT, "    return "), invoked=False)
        cid = completion_id(res)
        assert cid is not None, res
        final = await final_refine(client, cid)
        mine = [r for r in client.refines if r["completionId"] == cid]
        shown = first_text(res)
        inserts = deletes = 0
        for r in mine:
            for e in r["edits"]:
                empty = e["range"]["start"] == e["range"]["end"]
                inserts += empty and bool(e["newText"])
                deletes += not empty and not e["newText"]
            shown = apply_lsp_edits(shown, r["edits"])
            assert shown == r["text"]
            assert "<|" not in r["text"]  # no [MASK], DELETE or INSERT token as text
        assert shown == final["text"]
        assert inserts >= 1 and deletes >= 1, [r["edits"] for r in mine]
