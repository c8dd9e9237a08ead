"""Workspace context (llada_lsp.context.workspace, workspace_index, definitions): definitions found
across files, near-duplicates dropped, the gather's safety limit (the engine alone budgets,
tests/engine/prompt/test_prompt_builder.py), and the stability of the chunk tuple while typing (the
prompt cache depends on it)."""

from __future__ import annotations

from pathlib import Path

import pytest
from lsprotocol import types as t

from engine.api import ContextChunk
from llada_lsp.context.definitions import Definition, definition_text, extract_definitions
from llada_lsp.context.workspace import (
    CHUNK_LINES,
    GATHER_CHARS_PER_TOKEN,
    WorkspaceContext,
    block_text,
    code_only,
    estimate_tokens,
    gather,
    gather_limit,
    names_near,
)
from llada_lsp.context.workspace_index import WorkspaceIndex
from llada_lsp.options import OptionsError, parse_options
from llada_lsp.text.documents import DocumentStore

ROOT = Path(__file__).resolve().parents[3]

GEOMETRY = '''"""Geometry helpers."""
import math


def distance(a, b):
    """Euclidean distance of two points."""
    return math.hypot(a[0] - b[0], a[1] - b[1])


class Polygon:
    def __init__(self, points):
        self.points = points

    def perimeter(self):
        return sum(distance(p, q) for p, q in zip(self.points, self.points[1:]))
'''

MAIN = '''from geometry import distance, Polygon


def local_helper(x):
    return x * 2


def report(points):
    total = local_helper(len(points))
    d = distance(points[0], points[1])
    '''


def change(store: DocumentStore, uri: str, line: int, ch: int, text: str) -> None:
    doc = store.get(uri)
    rng = t.Range(t.Position(line, ch), t.Position(line, ch))
    store.change(uri, doc.version + 1, [t.TextDocumentContentChangePartial(range=rng, text=text)], "utf-16")


def setup(tmp_path: Path) -> tuple[DocumentStore, WorkspaceContext, str, str]:
    store = DocumentStore()
    main = (tmp_path / "main.py").as_uri()
    geo = (tmp_path / "geometry.py").as_uri()
    store.open(geo, "python", 1, GEOMETRY)
    store.open(main, "python", 1, MAIN)
    ws = WorkspaceContext(store)
    ws.set_roots([tmp_path.as_uri()])
    return store, ws, main, geo


# -- definitions -----------------------------------------------------------------------------
def test_definitions_of_several_languages() -> None:
    py = extract_definitions("python", GEOMETRY)
    assert [(d.name, d.start) for d in py] == [("distance", 4), ("Polygon", 9), ("__init__", 10),
                                               ("perimeter", 13)]
    assert py[1].members == (10, 13) and py[1].end == 14
    ts = extract_definitions("typescript", "// adds\nexport function add(a: number) { return a }\n"
                                           "class Q { push(x) { const inner = 1 } }\nconst K = 3;\n")
    assert [(d.name, d.start) for d in ts] == [("add", 0), ("Q", 2), ("push", 2), ("K", 3)]  # doc comment kept
    go = extract_definitions("go", "package p\nfunc F() {}\ntype S struct{}\nfunc (s *S) M() {}\n")
    assert [d.name for d in go] == ["F", "S", "M"]
    assert [d.name for d in extract_definitions("c", "static int *g(void) { return 0; }\n")] == ["g"]
    assert extract_definitions("plaintext", "def f(): pass") == ()


def test_long_class_becomes_a_skeleton() -> None:
    lines = ["class Big:", '    """Doc."""'] + [x for i in range(20) for x in (f"    def m{i}(self):", "        pass")]
    d = Definition("Big", 0, len(lines) - 1, tuple(2 + 2 * i for i in range(20)))
    text = definition_text(lines, d, max_lines=10)
    assert text.split("\n") == ["class Big:", '    """Doc."""'] + [f"    def m{i}(self):" for i in range(8)]
    short = Definition("m0", 2, 3)
    assert definition_text(lines, short) == "    def m0(self):\n        pass"


# -- pure helpers ----------------------------------------------------------------------------------
def test_names_near_the_cursor() -> None:
    text = "far_away = 1\n" + "\n" * 8 + "x = alpha(beta)\nresult = gamma + alp"
    assert names_near(text, len(text)) == ["gamma", "result", "beta", "alpha"]  # not the word being typed
    assert "far_away" not in names_near(text, len(text))
    assert names_near("return self.value", 17) == []  # keywords; the cursor's word
    # below the cursor too, after the line above at the same distance; the cursor's line first
    text = "top = 1\nup = load_rows(path)\ntotal = \nshow(total, rows)\nfar = 2\n"
    cursor = text.index("total = ") + 8
    assert names_near(text, cursor, 1, 1) == ["total", "path", "load_rows", "up", "show", "rows"]
    # a lowercase word seen only after a dot is any object's method; a distinctive one is kept
    text = "items.append(x)\ncfg.load_config()\nsave(cfg)\nstore.save()\nz = "
    assert names_near(text, len(text)) == ["save", "store", "cfg", "load_config", "items"]
    # words in strings and comments are not uses
    text = 'reader.read_all("baz qux")  # see helper_fn\nlog("it\'s", other)  // tail_word\nz = '
    assert names_near(text, len(text)) == ["other", "log", "read_all", "reader"]
    assert code_only('a = "x # y" + b  # c\n') == "a = " + " " * 7 + " + b  " + " " * 3 + "\n"


def test_gather_drops_duplicates_and_keeps_the_safety_limit() -> None:
    a = ContextChunk("a.py", "def f():\n    return 1\n")
    same = ContextChunk("b.py", "def f():\n    return 1")
    inside = ContextChunk("c.py", "    return 1")
    other = ContextChunk("d.py", "def g():\n    return 2")
    assert gather([a, same, inside, other], "", 1000) == (a, other)
    assert gather([a, other], "x = 1\ndef g():\n    return 2\n", 1000) == (a,)  # repeats the prompt's window
    assert gather([a, other], "", len(a.text)) == (a,)
    big = ContextChunk("e.py", "x" * 400)
    assert gather([big, other], "", len(other.text) + 5) == (other,)  # not a line of it fits: skipped
    # a chunk over what is left is cut to its leading lines (the engine cuts further, in tokens)
    long_def = ContextChunk("f.py", "def long_one(a, b):\n    s = a + b\n" + "    s += 1\n" * 60 + "    return s")
    (cut,) = gather([long_def], "", 40)
    assert cut.text == "def long_one(a, b):\n    s = a + b" and long_def.text.startswith(cut.text)
    assert gather([long_def], "", len("def long_one(a, b):") - 1) == ()


def test_token_estimate_is_an_upper_bound_for_the_embedded_tokenizer() -> None:
    tokenizers = pytest.importorskip("tokenizers")
    from engine.prompt.prompt_format import render_context

    tok = tokenizers.Tokenizer.from_file(str(ROOT / "engine/checkpoints/tiny-code/tokenizer.json"))
    for path in ("llada_lsp/context/workspace.py", "tests/llada_lsp/data/queue.ts", "tests/llada_lsp/data/shapes.py.txt"):
        text = (ROOT / path).read_text()
        for i in range(0, 3000, 600):
            c = ContextChunk(path, text[i: i + 600])
            assert estimate_tokens(c) >= len(tok.encode(render_context([c], "python")).ids), (path, i)


def test_the_safety_limit_leaves_the_budget_to_the_engine() -> None:
    """The server gathers loosely more than the engine's share (`max_context_tokens`, which it
    reports) can hold; the `contextTokens` option lowers it, 0 turns context off."""
    assert gather_limit(1024, 178) == 178 * GATHER_CHARS_PER_TOKEN
    assert gather_limit(300, 817) == 300 * GATHER_CHARS_PER_TOKEN
    assert gather_limit(1024, None) == 1024 * GATHER_CHARS_PER_TOKEN  # an engine that does not say
    assert gather_limit(0, 178) == 0 and gather_limit(1024, 0) == 0
    tokenizers = pytest.importorskip("tokenizers")
    from engine.prompt.prompt_format import render_context

    tok = tokenizers.Tokenizer.from_file(str(ROOT / "engine/checkpoints/tiny-code/tokenizer.json"))
    text = (ROOT / "llada_lsp/context/workspace.py").read_text()
    for i in range(0, 6000, 1000):  # what the limit lets through is more than the share in tokens
        c = ContextChunk("llada_lsp/context/workspace.py", text[i: i + gather_limit(1024, 178)])
        assert len(tok.encode(render_context([c], "python")).ids) > 178, i


def test_blocks_lie_on_a_grid() -> None:
    text = "\n".join(f"line {i}" for i in range(100))
    assert block_text(text, 1).split("\n")[0] == f"line {CHUNK_LINES}"
    assert len(block_text(text, 1).split("\n")) == CHUNK_LINES
    assert block_text(text, 5) == ""


# -- the chooser --------------------------------------------------------------------------------------
def test_definition_from_another_open_document(tmp_path: Path) -> None:
    store, ws, main, _ = setup(tmp_path)
    doc = store.get(main)
    chunks = ws.chunks_for(doc, len(doc.text), "", 1000)
    assert chunks[0] == ContextChunk("geometry.py", GEOMETRY.split("\n\n\n")[1].strip("\n"))
    assert all("local_helper(x)" not in c.text for c in chunks)  # defined here: not looked up
    assert ws.info()["paths"][0] == "geometry.py"


def test_definition_from_a_file_on_disk(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "units.py").write_text("def to_metres(feet):\n    return feet * 0.3048\n")
    (tmp_path / "node_modules").mkdir()
    (tmp_path / "node_modules" / "junk.py").write_text("def to_metres(x):\n    return 0\n")
    (tmp_path / "huge.py").write_text("def huge_one():\n    pass\n" + "#" * 300_000)
    (tmp_path / "blob.py").write_bytes(b"def blob_fn():\n    pass\n\x00\x01\x02")
    store = DocumentStore()
    uri = (tmp_path / "app.py").as_uri()
    doc = store.open(uri, "python", 1, "x = huge_one() + blob_fn()\ny = to_metres(x)\n")
    ws = WorkspaceContext(store, WorkspaceIndex())
    ws.set_roots([tmp_path.as_uri()])
    assert ws.index.scan("python") == 1  # app.py is not on disk; junk, huge and blob skipped
    chunks = ws.chunks_for(doc, len(doc.text), "", 1000)
    assert chunks == (ContextChunk("pkg/units.py", "def to_metres(feet):\n    return feet * 0.3048"),)
    assert ws.index.scan("python") == 0  # unchanged files are not parsed again


def test_files_changed_deleted_or_saved_on_disk_are_followed(tmp_path: Path) -> None:
    units, spare = tmp_path / "units.py", tmp_path / "spare.py"
    units.write_text("def to_metres(feet):\n    return feet * 0.3048\n")
    spare.write_text("def spare_part():\n    pass\n")
    store = DocumentStore()
    doc = store.open((tmp_path / "app.py").as_uri(), "python", 1, "y = to_metres(spare_part())\n")
    ws = WorkspaceContext(store, WorkspaceIndex())
    ws.set_roots([tmp_path.as_uri()])
    assert ws.index.scan("python") == 2
    first = ws.chunks_for(doc, len(doc.text), "", 1000)
    assert [c.path for c in first] == ["spare.py", "units.py"]
    gen = ws.index.generation
    # another tool rewrites one file and deletes the other; the next scan sees both
    units.write_text("def to_metres(feet, exact=True):\n    return feet * 0.3048\n")
    spare.unlink()
    assert ws.index.scan("python") == 1 and ws.index.generation == gen + 2
    assert ws.index.lookup("spare_part") == []
    second = ws.chunks_for(doc, len(doc.text), "", 1000)
    assert [c.text.split("\n")[0] for c in second] == ["def to_metres(feet, exact=True):"]
    # a document opened, edited, saved and closed: its file is read again at once, no scan
    uri = units.as_uri()
    store.open(uri, "python", 1, units.read_text())
    ws.index.index_open(store.get(uri))
    units.write_text("def to_metres(feet, exact=True, places=2):\n    return round(feet * 0.3048, places)\n")
    ws.closed(uri)
    store.close(uri)
    ws.index.settle(10)  # the file is read again off the event loop
    (entry, i), = ws.index.lookup("to_metres")
    assert entry.texts[i].startswith("def to_metres(feet, exact=True, places=2):")


def test_rescan_after_its_interval_and_new_roots(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import llada_lsp.context.workspace_index as wi
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    (a / "one.py").write_text("def one():\n    pass\n")
    (b / "two.py").write_text("def two():\n    pass\n")
    index = WorkspaceIndex()
    index.set_roots([a.as_uri()])
    assert index.request_scan("python") and index.thread is not None
    index.thread.join()
    assert index.lookup("one") != [] and len(index.files) == 1
    assert not index.request_scan("python")  # scanned just now
    monkeypatch.setattr(wi, "RESCAN_S", 0.0)
    (a / "three.py").write_text("def three():\n    pass\n")
    assert index.request_scan("python") and index.thread is not None
    index.thread.join()
    assert index.lookup("three") != []
    index.set_roots([b.as_uri()])  # the folder was swapped: a's files are forgotten
    assert index.lookup("one") == [] and index.lookup("three") == []
    index.scan("python")
    assert index.lookup("two") != []


def test_scan_is_bounded_by_file_count(tmp_path: Path) -> None:
    for i in range(5):
        (tmp_path / f"m{i}.py").write_text(f"def f{i}():\n    pass\n")
    index = WorkspaceIndex(max_files=3)
    index.set_roots([tmp_path.as_uri()])
    assert index.scan("python") == 3
    assert len(index.files) == 3


def test_chunks_are_stable_while_typing(tmp_path: Path) -> None:
    store, ws, main, geo = setup(tmp_path)
    doc = store.get(main)
    first = ws.chunks_for(doc, len(doc.text), "", 1000)
    builds = ws.builds
    line = doc.text.count("\n")
    col = len(doc.text) - doc.text.rfind("\n") - 1
    for ch in "return d + total * 2":  # each keystroke: a change and a request
        change(store, main, line, col, ch)
        col += 1
        assert ws.chunks_for(doc, len(doc.text), "", 1000) is first
    assert ws.builds == builds
    # a name that gains a definition elsewhere (Polygon) adds a whole chunk, the old ones kept
    change(store, main, line, col, "\n    shape = Polygon(points)")
    second = ws.chunks_for(doc, len(doc.text), "", 1000)
    assert ws.builds == builds + 1
    assert second[0].text.startswith("class Polygon:") and set(first) <= set(second)
    # another document changes far from the definitions: only its own block changes
    change(store, geo, 0, 0, "# edited\n")
    third = ws.chunks_for(doc, len(doc.text), "", 1000)
    assert ws.builds == builds + 2
    assert [c for c in third if c.text.startswith(("def distance", "class Polygon"))] == \
        [c for c in second if c.text.startswith(("def distance", "class Polygon"))]
    assert ws.chunks_for(doc, len(doc.text), "", 1000) is third  # and is stable again


def test_ring_of_edited_blocks_and_closing(tmp_path: Path) -> None:
    store = DocumentStore()
    a, b = (tmp_path / "a.py").as_uri(), (tmp_path / "b.py").as_uri()
    body = "\n".join(f"value_{i} = {i}" for i in range(100))
    store.open(a, "python", 1, "x = 1\n")
    store.open(b, "python", 1, body)
    ws = WorkspaceContext(store)
    ws.set_roots([tmp_path.as_uri()])  # open documents count inside a workspace folder only
    change(store, b, 70, 0, "# touched\n")
    ws.edited(b, [70])
    chunks = ws.chunks_for(store.get(a), 6, "", 10_000)
    assert chunks[0].path.endswith("b.py") and chunks[0].text.startswith(f"value_{2 * CHUNK_LINES} =") and "# touched" in chunks[0].text
    assert len(chunks) == 1  # b's first block is not added: b is in the ring
    ws.closed(b)
    store.close(b)
    assert ws.chunks_for(store.get(a), 6, "", 10_000) == ()
    assert ws.ring == {}


def test_options() -> None:
    opts, _ = parse_options({"workspaceContext": False, "contextTokens": 300})
    assert opts.workspace_context is False and opts.context_tokens == 300
    defaults, _ = parse_options()
    assert defaults.workspace_context is True and defaults.context_tokens == 1024
    assert parse_options({"contextTokens": 10**6})[0].context_tokens == 65536  # clamped (issue 41)
    for bad in ({"contextTokens": -1}, {"contextTokens": "many"},
                {"workspaceContext": "yes"}):
        with pytest.raises(OptionsError, match="workspaceContext|contextTokens"):
            parse_options(bad)


def test_class_fields_are_not_definitions() -> None:
    src = "LIMIT = 3\n\n\nclass Point:\n    x: int = 0\n    y = 1\n\n    def norm(self):\n        z = 2\n        return z\n"
    assert [d.name for d in extract_definitions("python", src)] == ["LIMIT", "Point", "norm"]
