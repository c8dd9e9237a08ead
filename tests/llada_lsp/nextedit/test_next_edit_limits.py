"""`llada/nextEdit`'s bounds (llada_lsp.nextedit.edit_limits, docs/lsp.md "Next-edit suggestions"):
the site limit and the depth guard answer with their reason, the parse check is a few parses
whatever the number of sites, and a request is cancelled by a newer edit, in the service's
worker process (which a crash only costs its request). Nothing here depends on wall-clock speed."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from llada_lsp.nextedit import edit_window
from llada_lsp.nextedit.edit_analysis import analyze
from llada_lsp.nextedit.edit_limits import MAX_DEPTH, MAX_SITES, Cancelled, Guard, parse
from llada_lsp.nextedit.edit_window import Suggested, keep
from llada_lsp.nextedit.next_edit import NextEditParams, NextEditService
from llada_lsp.nextedit.next_edit_work import Base, Snapshot, old_around
from llada_lsp.options import parse_options
from llada_lsp.text.documents import DocumentStore
from llada_lsp.text.positions import LineIndex
from llada_lsp.text.syntax import parser_for
from tests.llada_lsp.nextedit.test_next_edit_unit import ScriptedEngine

URI = "file:///big.py"


def calls(n: int) -> str:
    return "def f(a):\n    return a\n\n\n" + "f(1)\n" * n


def nested(depth: int) -> str:
    return "def g(x):\n    return x\n\n\ny = " + "(" * depth + "g(1)" + ")" * depth + "\n"


def service(text: str) -> tuple[NextEditService, DocumentStore, ScriptedEngine]:
    store = DocumentStore(1_000_000)
    store.open(URI, "python", 1, text)
    eng = ScriptedEngine()
    options = parse_options({"nextEdit": {"enabled": True}})[0]  # fills off (tiny-code's gate): no engine job
    return NextEditService(store, eng, options, lambda: "utf-16"), store, eng


def edit(svc: NextEditService, store: DocumentStore, old: str, new: str, version: int) -> None:
    doc = store.get(URI)
    svc.document_changing(doc)
    store.change(URI, version, [SimpleNamespace(text=doc.text.replace(old, new, 1))], "utf-16")
    svc.document_changed(URI)


async def test_over_the_site_limit_the_answer_says_so() -> None:
    svc, store, _ = service(calls(MAX_SITES + 5))
    edit(svc, store, "def f(a)", "def f(a, b)", 2)
    ans = (await svc.suggest(NextEditParams(URI, 2, 0, 10))).to_json()
    assert ans["suggestions"] == [] and ans["limit"] == "sites", ans
    assert "more than 1000" in ans["reason"] and "site limit" in ans["reason"]
    assert svc.debug_info()["counters"]["limit_sites"] == 1
    # under the limit, the same edit is followed at every call
    svc, store, _ = service(calls(MAX_SITES - 1))  # + the def: MAX_SITES occurrences of `f`
    edit(svc, store, "def f(a)", "def f(a, b)", 2)
    ans = (await svc.suggest(NextEditParams(URI, 2, 0, 10))).to_json()
    assert "limit" not in ans and ans["kind"] == "param_added" and len(ans["suggestions"]) == MAX_SITES - 1


async def test_a_rename_over_the_site_limit_is_refused_too() -> None:
    text = "v = 0\n" + "print(v)\n" * (MAX_SITES + 1)
    svc, store, _ = service(text)
    edit(svc, store, "v = 0", "w = 0", 2)
    ans = (await svc.suggest(NextEditParams(URI, 2, 0, 1))).to_json()
    assert ans["limit"] == "sites" and "`v` occurs more than" in ans["reason"], ans


async def test_the_depth_guard_answers_with_its_reason() -> None:
    svc, store, _ = service(nested(20_000))  # 40 KB: the one use of g lies under 20,000 parentheses
    edit(svc, store, "def g(x)", "def h(x)", 2)
    ans = (await svc.suggest(NextEditParams(URI, 2, 0, 5))).to_json()
    assert ans["suggestions"] == [] and ans["limit"] == "depth", ans
    assert f"deeper than {MAX_DEPTH} levels" in ans["reason"]
    # shallow enough, the same rename reaches its use
    svc, store, _ = service(nested(20))
    edit(svc, store, "def g(x)", "def h(x)", 2)
    ans = (await svc.suggest(NextEditParams(URI, 2, 0, 5))).to_json()
    assert [(s["oldText"], s["newText"]) for s in ans["suggestions"]] == [("g", "h")], ans


def test_the_depth_guard_holds_at_the_edit_itself() -> None:
    old = "x = 1\ny = " + "(" * 400 + "x" + ")" * 400 + "\n"
    new = old.replace("(x)", "(z)")
    p = parser_for("python")
    assert p is not None
    a = analyze("python", old, new, p.parse(old.encode()), p.parse(new.encode()))
    assert a.kind == "none" and a.limit == "depth" and not a.sites


async def test_a_newer_edit_cancels_the_running_analysis() -> None:
    """The request is answered at the next edit while its worker process is stopped (SIGSTOP):
    the server never waits for an analysis; continued, the worker drops the cancelled request
    and answers the next one."""
    svc, store, _ = service(calls(50))
    svc.typing_hold_s = 0.0
    edit(svc, store, "def f(a)", "def f(a, b)", 2)  # the worker starts here (warm)
    proc = svc.worker.proc
    assert proc is not None and proc.poll() is None
    os.kill(proc.pid, signal.SIGSTOP)
    try:
        pending = asyncio.ensure_future(svc.suggest(NextEditParams(URI, 2, 0, 10)))
        for _ in range(1000):  # the request is sent (its guard is registered)
            if URI in svc.guards:
                break
            await asyncio.sleep(0)
        guard = svc.guards[URI]
        edit(svc, store, "def f(a, b)", "def f(a, bc)", 3)  # the next edit
        assert guard.cancelled and guard.reason == "document changed"
        ans = (await asyncio.wait_for(pending, 60)).to_json()
        assert ans == {"version": 2, "suggestions": [], "reason": "document changed"}
        assert URI not in svc.guards
    finally:
        os.kill(proc.pid, signal.SIGCONT)
    ans = (await asyncio.wait_for(svc.suggest(NextEditParams(URI, 3, 0, 11)), 120)).to_json()
    assert ans["kind"] == "param_added" and len(ans["suggestions"]) == 50, ans
    assert svc.worker.proc is proc and svc.worker.starts == 1  # the same worker


async def test_a_worker_that_dies_answers_with_the_reason_and_the_next_request_starts_another() -> None:
    svc, store, _ = service(calls(5))
    svc.typing_hold_s = 0.0
    edit(svc, store, "def f(a)", "def f(a, b)", 2)
    proc = svc.worker.proc
    assert proc is not None
    os.kill(proc.pid, signal.SIGSTOP)
    pending = asyncio.ensure_future(svc.suggest(NextEditParams(URI, 2, 0, 10)))
    for _ in range(1000):
        if URI in svc.guards:
            break
        await asyncio.sleep(0)
    proc.kill()  # a crash (a grammar's bug on a hostile file) mid-request
    ans = (await asyncio.wait_for(pending, 60)).to_json()
    assert ans["suggestions"] == [] and ans["reason"].startswith("next-edit worker failed: the next-edit worker ended")
    ans = (await asyncio.wait_for(svc.suggest(NextEditParams(URI, 2, 0, 10)), 120)).to_json()
    assert ans["kind"] == "param_added" and len(ans["suggestions"]) == 5, ans
    assert svc.worker.starts == 2


async def test_no_file_of_the_working_directory_runs_in_the_worker(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker starts as every child Python (engine.daemon.child): from a directory holding
    `llada_lsp/` and `tree_sitter/` packages that write a canary, with a relative PYTHONPATH,
    none of them runs and the request is answered."""
    canary = tmp_path / "canary"
    for pkg in ("llada_lsp", "tree_sitter", "tree_sitter_python"):
        (tmp_path / pkg).mkdir()
        (tmp_path / pkg / "__init__.py").write_text(f"open({str(canary)!r}, 'a').write({pkg!r})\n")
    (tmp_path / "llada_lsp" / "nextedit").mkdir()
    (tmp_path / "llada_lsp" / "nextedit" / "__init__.py").write_text("")
    (tmp_path / "llada_lsp" / "nextedit" / "edit_worker.py").write_text(f"open({str(canary)!r}, 'a').write('w')\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONPATH", ".")
    svc, store, _ = service(calls(3))
    svc.typing_hold_s = 0.0
    edit(svc, store, "def f(a)", "def f(a, b)", 2)
    ans = (await asyncio.wait_for(svc.suggest(NextEditParams(URI, 2, 0, 10)), 120)).to_json()
    assert ans["kind"] == "param_added" and len(ans["suggestions"]) == 3, ans
    assert not canary.exists()


def test_a_cancelled_parse_stops_reading() -> None:
    data = ("f(1)\n" * 20_000).encode()
    p = parser_for("python")
    assert p is not None
    reads = [0]

    class CancelOnThirdRead(Guard):
        def pause(self) -> None:  # called at each chunk read while not cancelled
            reads[0] += 1
            if reads[0] == 3:
                self.cancel("document changed")
            super().pause()

    with pytest.raises(Cancelled, match="document changed"):
        parse(p, data, None, CancelOnThirdRead())
    assert reads[0] == 3  # the parse ended at the cancel: 3 of its ~100 chunks read
    whole = parse(p, data, None, Guard())
    assert whole.root_node.child_count == 20_000 and not whole.root_node.has_error


def test_the_parse_check_is_a_few_parses_whatever_the_sites(monkeypatch: pytest.MonkeyPatch) -> None:
    text = "".join(f"x{k} = f({k})\n" for k in range(300))
    index = LineIndex.of(text)
    found = []
    for k in range(300):
        at = text.index(f"f({k})") + len(f"f({k}")
        found.append(Suggested(at, at, ", k k" if k in (7, 150) else ", b", 1.0))  # two add a parse error
    parses = [0]
    real = edit_window.parse

    def counting(*args: Any) -> Any:
        parses[0] += 1
        return real(*args)

    monkeypatch.setattr(edit_window, "parse", counting)
    out = keep("python", text, index, found, (299, 299), 0)
    assert len(out) == 297 and all(s.text == ", b" for s in out)  # the two, and the kept line's, left out
    assert parses[0] == 2  # all at once, then again without the two blamed


def test_overlapping_suggestions_are_checked_in_layers() -> None:
    text = "f(f(1, 2), 3)\n\n"
    inner = Suggested(text.index("1, 2"), text.index("1, 2") + 4, "2, 1", 1.0)
    outer = Suggested(2, text.index(", 3)") + 3, "3, f(1, 2)", 1.0)
    out = keep("python", text, LineIndex.of(text), [outer, inner], (1, 1), 0)
    assert out == sorted([outer, inner], key=lambda s: (s.start, s.end))


CASES = [  # (language, text, an edit: old -> new, whether it lies inside one top-level statement)
    ("python", "class A:\n    def m(self, a):\n        return a\n\n\nx = A()\nx.m(1)\n\n\ndef g():\n    A().m(2)\n",
     "def m(self, a)", "def m(self, a, b)", True),
    ("python", "from dataclasses import dataclass\n\n\n@dataclass\nclass P:\n    x: int\n\n\np = P(1)\nq = P(x=2)\n",
     "    x: int", "    x: int\n    y: int", False),  # the line's end is past the class: the whole base is parsed
    ("python", "def f():\n    return 1, 2\n\n\na, b = f()\n", "return 1, 2", "return 1, 2, 3", True),
    ("go", "package m\n\ntype T struct {\n\tA int\n}\n\nfunc g() T {\n\treturn T{A: 1}\n}\n", "\tA int\n", "\tA int\n\tB int\n",
     True),
    ("javascript", "function f(a, b) {\n  return a - b;\n}\nf(1, 2);\nf(3, 4);\n", "function f(a, b)", "function f(b, a)", True),
]


@pytest.mark.parametrize("lang,old,a,b,inside", CASES)
def test_the_base_parsed_around_the_edit_gives_the_whole_parse_s_answer(lang: str, old: str, a: str, b: str,
                                                                         inside: bool) -> None:
    new = old.replace(a, b, 1)
    p = parser_for(lang)
    assert p is not None
    old_tree, new_tree = p.parse(old.encode()), p.parse(new.encode())
    whole = analyze(lang, old, new, old_tree, new_tree)
    assert whole.sites, whole
    snap = Snapshot(lang, new, 2, 1, new_tree, False)
    partial = old_around(snap, Base(old), new_tree, Guard())
    covered = partial.root_node.end_byte - partial.root_node.start_byte
    assert (covered < len(old.encode())) == inside  # only the statement, when the edit is inside one
    assert analyze(lang, old, new, partial, new_tree) == whole
