"""A pause mid-word (issue 51 item 10): a request whose cursor is in or right after a word the
edit changed waits until the document has been still for `typing_hold_s`; the next edit
cancels it first, so a half-typed name is never shown at a short pause. Ordering only: the
hold is an hour where the test needs it held, zero where it needs it over."""

from __future__ import annotations

import asyncio

from llada_lsp.nextedit.next_edit import NextEditParams
from llada_lsp.nextedit.next_edit_work import typing_word
from tests.llada_lsp.nextedit.test_next_edit_unit import URI, edit, service, until


def test_typing_word() -> None:
    text = "def main(wid, height):\n"
    end = text.index("wid") + 3
    assert typing_word(text, end, (end - 1, end))  # `d` just typed, the cursor after it
    assert typing_word(text, end - 1, (end - 1, end))  # inside the word
    assert not typing_word(text, end + 1, (end - 1, end))  # the cursor has left it (after the comma)
    assert not typing_word(text, end, (0, 3))  # a word the edit did not touch
    assert not typing_word(text, text.index("height"), (end - 1, end))  # before a word: not typing it
    # deletions: a backspace inside the word is typing; `, b` deleted after `a` is not
    assert typing_word(text, end, (end, end), "t")  # `widt` -> `wid`
    deleted = "def f(a):\n"
    assert not typing_word(deleted, deleted.index("a") + 1, (7, 7), ", b")


async def test_a_half_typed_name_waits_and_the_next_keystroke_drops_it() -> None:
    svc, store, _ = service()
    svc.typing_hold_s = 3600.0
    edit(svc, store, "def main(width, height)", "def main(wid, height)", 2)  # `width` -> `wid` so far
    pending = asyncio.ensure_future(svc.suggest(NextEditParams(URI, 2, 4, 12)))  # after `wid`
    await until(lambda: svc.counters["held_typing"] == 1)
    assert not pending.done()  # held: the rename to `wid` is not shown
    edit(svc, store, "def main(wid, height)", "def main(wide, height)", 3)  # the next keystroke
    ans = (await pending).to_json()
    assert ans == {"version": 2, "suggestions": [], "reason": "document changed"}


async def test_once_the_word_is_left_or_the_hold_is_over_the_rename_shows() -> None:
    svc, store, _ = service()
    svc.typing_hold_s = 3600.0
    edit(svc, store, "def main(width, height)", "def main(wide, height)", 2)
    ans = await svc.suggest(NextEditParams(URI, 2, 4, 14))  # the cursor after `wide, `: the word is left
    assert ans.kind == "rename" and [s["newText"] for s in ans.suggestions] == ["wide"]
    assert svc.counters["held_typing"] == 0
    svc.typing_hold_s = 0.0  # a pause as long as the hold: the name counts as typed
    ans = await svc.suggest(NextEditParams(URI, 2, 4, 13))  # the cursor right after `wide`
    assert ans.kind == "rename" and [s["newText"] for s in ans.suggestions] == ["wide"]
