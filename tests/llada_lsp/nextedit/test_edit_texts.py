"""The next-edit worker's copy of each document kept in step (llada_lsp.nextedit.edit_texts,
issue 49): a request ships the edit, not the file; a worker out of step gets the texts whole
and still answers right. Byte counts are the messages' own sizes, not timings."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from llada_lsp.nextedit.edit_limits import Guard
from llada_lsp.nextedit.edit_texts import KEEP_DOCS, OutOfStep, Texts
from llada_lsp.nextedit.next_edit import NextEditParams
from tests.llada_lsp.nextedit.test_next_edit_limits import URI, calls, edit, service


def test_both_sides_stay_in_step_over_edits_and_rebuild_the_text() -> None:
    server, worker = Texts(), Texts()
    text = calls(2000)
    first = server.ref(URI, text)
    assert "full" in first and worker.resolve(URI, first) == text  # the first sight of a document: whole
    again = server.ref(URI, text)
    assert set(again) == {"t"} and worker.resolve(URI, again) == text  # the same text: named only
    for i in range(30):
        new = text.replace("f(1)\n", f"f({i}, 2)\n", 1 + i)
        ref = server.ref(URI, new)
        assert "full" not in ref and len(ref["mid"]) < 40 * (i + 1), ref  # the changed middle only
        assert worker.resolve(URI, ref) == new
        base = server.ref(URI, text)  # the base, still held: its id alone
        assert set(base) == {"t"} and worker.resolve(URI, base) == text
    assert server.docs == worker.docs


def test_a_text_not_held_is_out_of_step_not_a_wrong_text() -> None:
    server, worker = Texts(), Texts()
    worker.resolve(URI, server.ref(URI, "a = 1\n" * 100))
    worker.drop(URI)  # the worker lost it (a restart the server missed)
    with pytest.raises(OutOfStep):
        worker.resolve(URI, server.ref(URI, "a = 2\n" + "a = 1\n" * 99))
    forged = {"t": 99, "from": 1, "p": 3, "s": 3, "mid": "xx", "n": 1000}  # a length that does not add up
    worker.resolve(URI, {"t": 1, "full": "a = 1\n" * 100})
    with pytest.raises(OutOfStep):
        worker.resolve(URI, forged)


def test_the_documents_held_are_bounded_alike() -> None:
    server, worker = Texts(), Texts()
    for k in range(KEEP_DOCS + 5):
        worker.resolve(f"file:///{k}.py", server.ref(f"file:///{k}.py", f"x = {k}\n"))
    assert len(server.docs) == len(worker.docs) == KEEP_DOCS and server.docs == worker.docs


async def test_a_request_ships_the_edit_not_the_file() -> None:
    """On a 500 KB file, the first edit sends the text before it once (the base, parsed while
    the user types); each request then sends a few hundred bytes, and is answered in full."""
    text = calls(100) + "x = 1\n" * 80_000
    svc, store, _ = service(text)
    svc.typing_hold_s = 0.0
    edit(svc, store, "def f(a)", "def f(a, b)", 2)
    primed = svc.worker.sent_bytes
    assert primed > len(text)  # the base, whole, once
    ans = (await asyncio.wait_for(svc.suggest(NextEditParams(URI, 2, 0, 10)), 120)).to_json()
    assert ans["kind"] == "param_added" and len(ans["suggestions"]) == 100, ans
    edit(svc, store, "def f(a, b)", "def f(a, bb)", 3)  # the same parameter, named on
    ans = (await asyncio.wait_for(svc.suggest(NextEditParams(URI, 3, 0, 11)), 120)).to_json()
    assert ans["kind"] == "param_added" and len(ans["suggestions"]) == 100, ans
    assert svc.worker.sent_bytes - primed < 20_000  # two requests and their checks, not 4 x 500 KB
    assert svc.worker.resyncs == 0


async def test_a_worker_out_of_step_gets_the_texts_whole_and_answers() -> None:
    svc, store, _ = service(calls(20))
    svc.typing_hold_s = 0.0
    edit(svc, store, "def f(a)", "def f(a, b)", 2)
    doc = store.get(URI)
    svc.worker.texts.ref(URI, doc.text)  # the server now believes the worker holds a text never sent
    ans = (await asyncio.wait_for(svc.suggest(NextEditParams(URI, 2, 0, 10)), 120)).to_json()
    assert ans["kind"] == "param_added" and len(ans["suggestions"]) == 20, ans
    assert svc.worker.resyncs == 1
    ans = (await asyncio.wait_for(svc.suggest(NextEditParams(URI, 2, 0, 10)), 120)).to_json()
    assert len(ans["suggestions"]) == 20 and svc.worker.resyncs == 1  # in step again


async def test_a_worker_past_its_memory_limit_is_restarted_and_the_next_request_answers() -> None:
    """The limit is the process's resident bytes as its answers say: set below any real worker's,
    the worker ends after the request (none running), and the next request starts another, gets
    the texts whole and answers in full."""
    svc, store, _ = service(calls(30))
    svc.typing_hold_s = 0.0
    edit(svc, store, "def f(a)", "def f(a, b)", 2)
    ans = (await asyncio.wait_for(svc.suggest(NextEditParams(URI, 2, 0, 10)), 120)).to_json()
    assert len(ans["suggestions"]) == 30 and svc.worker.rss > 10 << 20  # a Python with tree-sitter
    assert svc.worker.alive and svc.worker.memory_restarts == 0  # under the default limit: kept
    first = svc.worker.proc
    assert first is not None
    svc.worker.max_rss = 1 << 20
    ans = (await asyncio.wait_for(svc.suggest(NextEditParams(URI, 2, 0, 10)), 120)).to_json()
    assert len(ans["suggestions"]) == 30, ans
    assert svc.worker.memory_restarts == 1 and not svc.worker.alive
    assert first.wait(60) == 0  # it ended (its stdin closed), not killed
    svc.worker.max_rss = 0  # no bound
    ans = (await asyncio.wait_for(svc.suggest(NextEditParams(URI, 2, 0, 10)), 120)).to_json()
    assert ans["kind"] == "param_added" and len(ans["suggestions"]) == 30, ans
    assert svc.worker.starts == 2 and svc.debug_info()["workerMemoryRestarts"] == 1


async def test_a_closed_document_leaves_nothing_in_the_worker() -> None:
    """didClose drops the document's trees, texts, held analysis and request guards in the worker
    (and the service's own state of it); the other document's stay. The request on `URI` is
    held mid-word (analysed, its check not sent) when the document closes."""
    svc, store, _ = service(calls(10))
    other = "file:///other.py"
    store.open(other, "python", 1, calls(5))
    doc = store.get(other)
    svc.document_changing(doc)
    store.change(other, 2, [SimpleNamespace(text=doc.text.replace("def f(a)", "def f(a, c)"))], "utf-16")
    svc.document_changed(other)
    svc.typing_hold_s = 0.0
    ans = (await asyncio.wait_for(svc.suggest(NextEditParams(other, 2, 0, 10)), 120)).to_json()
    assert len(ans["suggestions"]) == 5, ans
    svc.typing_hold_s = 600.0  # `b` is being typed: the request waits after its analysis
    edit(svc, store, "def f(a)", "def f(a, b)", 2)
    pending = asyncio.ensure_future(svc.suggest(NextEditParams(URI, 2, 0, 10)))
    while svc.counters["held_typing"] == 0 and not pending.done():
        await asyncio.sleep(0.01)  # until the analysis is answered (the worker's own time)
    guard = Guard()
    held = await svc.worker.held(guard)
    assert (held["mirrors"], held["texts"], held["pending"], held["guards"]) == (2, 2, 1, 1), held
    svc.document_closed(URI)
    store.close(URI)
    assert (await asyncio.wait_for(pending, 60)).to_json()["reason"] == "closed"
    held = await svc.worker.held(guard)
    assert (held["mirrors"], held["texts"], held["pending"], held["guards"]) == (1, 1, 0, 0), held
    svc.document_closed(other)
    held = await svc.worker.held(guard)
    assert (held["mirrors"], held["texts"], held["pending"], held["guards"]) == (0, 0, 0, 0), held
    assert not svc.bases and not svc.changed_at and not svc.latest and not svc.worker.texts.docs
