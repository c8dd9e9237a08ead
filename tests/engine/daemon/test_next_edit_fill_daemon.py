"""Next-edit's masked fills over the daemon: the language server's service (llada_lsp.nextedit.next_edit)
on a `WsEngineClient` against a served daemon answers an added parameter with the same fills
as the in-process engine gives for the same requests, its sites decoded together as rows (each
a `complete` message), with the weakest token's confidence in the done stats."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from types import SimpleNamespace

import pytest

from engine.service import TextEngine
from llada_lsp.engines.ws_engine import WsEngineClient
from llada_lsp.nextedit.edit_analysis import analyze
from llada_lsp.nextedit.edit_window import (
    FILL_PREFIX_CHARS,
    FILL_SUFFIX_CHARS,
    adds_parse_error,
    fill_request,
    from_fill,
)
from llada_lsp.nextedit.next_edit import NextEditParams, NextEditService
from llada_lsp.options import parse_options
from llada_lsp.text.documents import DocumentStore
from llada_lsp.text.syntax import parser_for
from tests.engine.daemon.daemon_helpers import serve_in_thread, stop_served

TOKEN = "next-edit-fill-token"
URI = "file:///w/p.py"
OLD = ("def greet(name):\n    print('hello', name)\n\n\ndef main(user, greeting):\n    greet(user)\n"
       "    greet(user + '!')\n    return user\n")
NEW = OLD.replace("def greet(name)", "def greet(name, greeting)")


@pytest.fixture(scope="module")
def eng() -> Iterator[TextEngine]:
    yield TextEngine(threads=1)


def test_fills_over_the_daemon_equal_the_in_process_ones(eng: TextEngine) -> None:
    parser = parser_for("python")
    assert parser is not None
    a = analyze("python", OLD, NEW, parser.parse(OLD.encode()), parser.parse(NEW.encode()))
    assert a.kind == "param_added" and len(a.sites) == 2 and a.definition is not None
    sig = NEW[a.definition[0]:a.definition[1]]
    local = []
    for k, site in enumerate(a.sites):
        req = fill_request(f"l{k}", f"{URI}\0next-edit\0{k}", "p.py", NEW, site, sig, FILL_PREFIX_CHARS,
                           FILL_SUFFIX_CHARS, 12, "speedy")
        done = list(eng.complete(req))[-1]
        assert done.kind == "done" and done.stats is not None
        sug = from_fill(site, done.text, done.stats["min_confidence"])
        assert 0.0 < done.stats["min_confidence"] <= 1.0
        if sug is None or adds_parse_error("python", NEW, sug, 0):
            # an empty fill or one that does not parse: the server shows the placeholder (the name)
            local.append((site.before + site.hint + site.after, 0.0))
        else:
            local.append((sug.text, sug.confidence))
    assert local, "the embedded model fills at least one call here"
    s = serve_in_thread(eng, token=TOKEN, max_batch=4)

    async def run() -> dict:
        client = WsEngineClient(s.url, token=TOKEN)
        await client.start(lambda _m, _p: None)
        client.set_deadlines(0, 0)
        try:
            store = DocumentStore(1_000_000)
            store.open(URI, "python", 1, OLD)
            opts = parse_options({"nextEdit": {"enabled": True, "threshold": 1e-6}, "mode": "speedy"})[0]
            svc = NextEditService(store, client, opts, lambda: "utf-16")
            doc = store.get(URI)
            svc.document_changing(doc)
            store.change(URI, 2, [SimpleNamespace(text=NEW)], "utf-16")
            return (await svc.suggest(NextEditParams(URI, 2, 0, 24))).to_json()
        finally:
            await client.close()

    try:
        ans = asyncio.run(run())
    finally:
        stop_served(s)
    assert ans["kind"] == "param_added", ans
    want = [(text, round(conf, 6)) for text, conf in local]
    got = [(x["newText"], x["confidence"]) for x in ans["suggestions"]]
    assert [g[0] for g in got] == [w[0] for w in want]
    for (_, gc), (_, wc) in zip(got, want, strict=True):
        assert gc == pytest.approx(wc, abs=1e-4)
