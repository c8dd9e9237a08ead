"""Names in scope through the real server over stdio: in a file that imports `apply_discount`
fifteen lines above, typing `discounted = apply_disc` completes `apply_discount` (issue 43),
and a definition (`def apply_d`) is left to the model."""

from __future__ import annotations

import re
from typing import Any

import pytest
from lsprotocol import types as t

from tests.llada_lsp.lsp_helpers import (
    DATA,
    debug_info,
    inline,
    item_texts,
    needs_model,
    open_doc,
    session_fixture,
)

pytestmark = [pytest.mark.asyncio(loop_scope="module"), needs_model]

SOURCE = '''from shop.pricing import apply_discount, TAX_RATE


class Cart:
    """A shopping cart."""

    def __init__(self, items):
        self.items = list(items)

    def subtotal(self):
        total = 0
        for item in self.items:
            total += item.price * item.quantity
        return total

    def checkout(self, code):
        amount = self.subtotal()
        discounted = apply_disc
'''

client = session_fixture({"debounceMs": 0, "maxTokens": {"line": 16, "statements": 16, "block": 16}})


def position_after(text: str, needle: str) -> t.Position:
    i = text.index(needle) + len(needle)
    return t.Position(text.count("\n", 0, i), i - (text.rfind("\n", 0, i) + 1))


def completed_word(line: str, insert: str) -> str:
    """The identifier at the cursor once `insert` is accepted after `line`'s text."""
    return re.findall(r"[A-Za-z_][A-Za-z0-9_]*", line + insert.split("(")[0].split(" ")[0])[-1]


async def test_apply_disc_completes_the_imported_name(client: Any) -> None:
    lines = SOURCE.split("\n")
    use = next(i for i, ln in enumerate(lines) if ln.endswith("apply_disc"))
    assert use - 0 >= 15  # the import is fifteen lines above or more
    uri = open_doc(client, "cart.py", "python", text=SOURCE, uri=(DATA / "names_cart.py").as_uri())
    for invoked in (False, True):
        res = await inline(client, uri, position_after(SOURCE, "discounted = apply_disc"), invoked=invoked)
        texts = item_texts(res)
        assert texts, "no completion"
        assert completed_word("        discounted = apply_disc", texts[0]) == "apply_discount", texts
        if invoked:  # cycling: every candidate uses a name that exists
            assert all(completed_word("        discounted = apply_disc", x) == "apply_discount" for x in texts), texts
    info = await debug_info(client)
    assert info["counters"].get("names_constrained", 0) >= 1
    # the name queries were compiled as the document opened, not at its first request
    assert info["counters"].get("names_warmed", 0) >= 1


async def test_a_definition_is_not_constrained(client: Any) -> None:
    text = SOURCE + "\n\ndef apply_d"
    uri = open_doc(client, "defs.py", "python", text=text, uri=(DATA / "names_defs.py").as_uri())
    before = (await debug_info(client))["counters"].get("names_constrained", 0)
    await inline(client, uri, position_after(text, "def apply_d"))
    assert (await debug_info(client))["counters"].get("names_constrained", 0) == before
