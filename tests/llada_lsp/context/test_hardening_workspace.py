"""Hardening, second round (issue 41): a repository and its settings are untrusted input.

One regression test per finding: links out of the workspace and special files are never read
(1, 2), nested settings sections cannot pass the machine-scoped filter (3), numeric options are
clamped to the documented ranges, the same as VS Code's package.json (6), a non-UTF-8 file name
never breaks the prompt builder (7), 1,500 nested folders are walked (8), a Content-Length
larger than what follows or than the limit does not deafen the server, `file:.` folders and
huge `llada/nextEdit` ranges are refused (9). The index runs on real files (links, a FIFO,
/proc and /dev links, a socket); the framing and didClose tests drive the real server process."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from engine.api import ContextChunk
from engine.prompt.builder import PromptBuilder
from llada_lsp.context.safe_files import read_regular, resolved_roots
from llada_lsp.context.workspace import WorkspaceContext
from llada_lsp.context.workspace_index import DEF_COST, WorkspaceIndex
from llada_lsp.lsp.limits import MAX_EDITED_LINES, LimitError, folder_uri, next_edit_params
from llada_lsp.nextedit.next_edit import parse_params
from llada_lsp.options import RANGES, parse_options, workspace_settings
from llada_lsp.text.documents import DocumentStore
from tests.fakes.raw_lsp import initialized, msg, notification, request, stop
from tests.llada_lsp.lsp_helpers import EMBEDDED, ROOT

MARKER = "SECRET-MARKER-7f3a"


def hostile_tree(tmp_path: Path) -> tuple[Path, Path]:
    """A workspace whose files link out, to special files and to a secret beside it."""
    ws, outside = tmp_path / "ws", tmp_path / "outside"
    ws.mkdir(), outside.mkdir()
    secret = outside / "creds.py"
    secret.write_text(f"def stolen():\n    return '{MARKER}'\n")
    (ws / "good.py").write_text("def good_one():\n    return 1\n")
    (ws / "link_abs.py").symlink_to(secret)
    (ws / "link_rel.py").symlink_to(Path("..") / "outside" / "creds.py")
    (ws / "dirlink").symlink_to(outside, target_is_directory=True)
    (ws / "stdin.py").symlink_to("/proc/self/fd/0")
    (ws / "stdout.py").symlink_to("/proc/self/fd/1")
    (ws / "zero.py").symlink_to("/dev/zero")
    (ws / "inner_link.py").symlink_to(ws / "good.py")  # a link inside the workspace: fine
    os.mkfifo(ws / "fifo.py")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(ws / "sock.py"))
    sock.close()
    return ws, secret


def test_the_index_reads_only_regular_files_inside_the_workspace(tmp_path: Path) -> None:
    ws, secret = hostile_tree(tmp_path)
    index = WorkspaceIndex()
    index.set_roots([ws.as_uri()])
    t0 = time.monotonic()
    assert index.scan("python") == 2  # good.py and the link to it; nothing else
    assert time.monotonic() - t0 < 5  # the FIFO and /dev/zero never blocked it
    assert sorted(Path(k).name for k in index.files) == ["good.py", "inner_link.py"]
    assert index.lookup("stolen") == []
    assert all(MARKER not in t for e in index.files.values() for t in e.texts)
    roots = resolved_roots([ws])
    for name in ("link_abs.py", "link_rel.py", "stdin.py", "stdout.py", "zero.py", "fifo.py", "sock.py"):
        assert read_regular(ws / name, roots, 1 << 20) is None, name
    assert read_regular(ws / "dirlink" / "creds.py", roots, 1 << 20) is None
    assert read_regular(secret, resolved_roots([tmp_path]), 1 << 20) is not None  # a control


def test_closing_a_fifo_backed_document_does_not_block(tmp_path: Path) -> None:
    ws, _ = hostile_tree(tmp_path)
    store = DocumentStore()
    ctx = WorkspaceContext(store, WorkspaceIndex())
    ctx.set_roots([ws.as_uri()])
    for name in ("fifo.py", "stdin.py", "link_abs.py"):
        uri = (ws / name).as_uri()
        store.open(uri, "python", 1, "x = 1\n")
        ctx.index.index_open(store.get(uri))
        t0 = time.monotonic()
        ctx.closed(uri)
        store.close(uri)
        assert time.monotonic() - t0 < 1.0, name  # the re-read is not on the caller's thread
        ctx.index.settle(5)  # and it ends: nothing was opened blocking
    assert ctx.index.lookup("stolen") == []


@pytest.mark.asyncio(loop_scope="function")
async def test_did_close_of_a_fifo_keeps_the_server_answering(tmp_path: Path) -> None:
    ws, _ = hostile_tree(tmp_path)
    r = await initialized()
    try:
        await r.write(msg(notification("workspace/didChangeWorkspaceFolders", {"event": {
            "added": [{"uri": ws.as_uri(), "name": "ws"}], "removed": []}})))
        for name in ("fifo.py", "stdin.py", "stdout.py"):
            uri = (ws / name).as_uri()
            await r.write(msg(notification("textDocument/didOpen", {"textDocument": {
                "uri": uri, "languageId": "python", "version": 1, "text": "x = 1\n"}})))
            await r.write(msg(notification("textDocument/didClose", {"textDocument": {"uri": uri}})))
        await r.send_then_probe(b"", timeout=10)
    finally:
        await stop(r)


def test_deep_trees_and_non_utf8_names() -> None:
    # not under pytest's tmp_path: its clean-up (shutil.rmtree) recurses and would fail on it
    top = Path(tempfile.mkdtemp(prefix="llada-deep-"))
    try:
        deep = top
        for _ in range(1500):  # os.makedirs itself recurses
            deep = deep / "d"
            deep.mkdir()
        (deep / "bottom.py").write_text("def at_the_bottom():\n    pass\n")
        with open(os.fsencode(top) + b"/bad\xff.py", "wb") as f:
            f.write(b"def bad_name():\n    pass\n")
        (top / "new\nline.py").write_text("def newline_name():\n    pass\n")
        index = WorkspaceIndex()
        index.set_roots([top.as_uri()])
        assert index.scan("python", max_s=60) == 1
        assert index.lookup("at_the_bottom") != [] and index.lookup("bad_name") == []
        assert index.lookup("newline_name") == []
    finally:
        subprocess.run(["rm", "-rf", str(top)], check=True)  # GNU rm does not recurse on the stack


def test_the_index_is_bounded_by_max_files_and_max_bytes(tmp_path: Path) -> None:
    for i in range(6):
        (tmp_path / f"m{i}.py").write_text(f"def f{i}():\n    pass\n" + "#" * 1000)
    one = 1020 + DEF_COST  # a file's bytes and its one definition's estimated overhead
    opts, _ = parse_options({"workspaceIndex": {"maxFiles": 4, "maxBytes": 2 * one + 200}})
    index = WorkspaceIndex(max_files=opts.workspace_index.max_files, max_bytes=opts.workspace_index.max_bytes)
    index.set_roots([tmp_path.as_uri()])
    assert index.scan("python") == 3  # the third file passes the limit: the scan stops there
    assert sum(e.cost() for e in index.files.values()) <= 3 * one


SHAPES = [
    {"engine": "ws://evil:1"},
    {"llada": {"engine": "ws://evil:1"}},
    {"llada": {"llada": {"engine": "ws://evil:1"}}},
    {"llada": {"llada": {"llada": {"engine": "ws://evil:1"}}}},
    {"llada": {"llada": {"sglang": {"urls": {"speedy": "http://evil:1"}}}}},
    {"llada": {"Engine": "ws://evil:1"}},
    {"llada": {"engine_token": "t", "engineToken": "t"}},
    {"llada": {"promptTemplate": "/evil.jinja", "prompt_template": "/evil.jinja"}},
    {"llada": {"llada": {"model": "/evil"}}, "engine": "ws://evil:1"},
    {"llada.engine": "ws://evil:1"},
    {"llada": {"llada.engine": "ws://evil:1"}},
    {"llada": "ws://evil:1"},
    {"llada": [{"engine": "ws://evil:1"}]},
    {"llada": {"nextEdit": {"llada": {"engine": "ws://evil:1"}}}},
]


@pytest.mark.parametrize("shape", SHAPES, ids=[json.dumps(s)[:50] for s in SHAPES])
def test_no_settings_shape_passes_the_machine_scoped_filter(shape: dict) -> None:
    kept, _ = workspace_settings(shape)
    base, _ = parse_options({"engine": "inprocess"})
    try:
        opts, _ = parse_options(kept, base=base)
    except ValueError:
        return  # refused whole: the previous options stay
    assert opts.engine == "inprocess" and opts.sglang.urls == {} and opts.engine_token is None
    assert opts.model is None and opts.prompt_template is None


def test_numeric_options_are_clamped_and_workspace_deadlines_of_zero_refused() -> None:
    opts, warnings = parse_options({"debounceMs": 86_400_000, "nextEdit": {"siteTokens": 10**9},
                                    "cacheSize": 10**9, "maxTokens": {"line": 0}})
    assert (opts.debounce_ms, opts.next_edit.site_tokens, opts.cache_size, opts.max_tokens.line) == (2000, 64, 4096, 1)
    assert len(warnings) == 4 and any("debounceMs" in w for w in warnings)
    for name, (_lo, hi) in RANGES.items():  # every range names a real numeric option
        *outer, last = name.split(".")
        src: dict = {last: hi + 1}
        for part in reversed(outer):
            src = {part: src}
        assert any(name in w for w in parse_options(src)[1]), name
    kept, refused = workspace_settings({"engineTimeoutMs": 0, "engineFirstEventMs": 0, "debounceMs": 5})
    assert kept == {"debounceMs": 5} and refused == {"engineTimeoutMs": 0, "engineFirstEventMs": 0}
    assert parse_options({"engineTimeoutMs": 0})[0].engine_timeout_ms == 0  # the user's own: allowed


def test_vscode_settings_have_the_servers_bounds() -> None:
    pkg = json.loads((ROOT / "editors/vscode/package.json").read_text())
    props = pkg["contributes"]["configuration"]["properties"]
    flat: dict[str, dict] = {}
    for key, spec in props.items():
        name = key.removeprefix("llada.")
        flat[name] = spec
        for sub, subspec in spec.get("properties", {}).items():
            flat[f"{name}.{sub}"] = subspec
    both = [n for n in RANGES if n in flat]
    assert len(both) >= 7, both
    for name in both:
        lo, hi = RANGES[name]
        assert (flat[name].get("minimum"), flat[name].get("maximum")) == (lo, hi), name


def test_a_non_utf8_file_name_does_not_break_the_prompt_builder() -> None:
    builder = PromptBuilder.from_dir(EMBEDDED, 256)
    name = os.fsdecode(b"pkg/bad\xff.py")  # a lone surrogate, as os.listdir gives it
    layout = builder.layout("def f(x):\n    return ", "", heal=False, doc_key=name,
                            context=[ContextChunk(name, "def g():\n    return '\udcff'\n")])
    assert layout.ids and layout.context_chunks == 1  # the chunk is in, its bad code point replaced


def test_limits_of_next_edit_params_and_workspace_folders() -> None:
    p = parse_params({"textDocument": {"uri": "file:///a.py"}, "position": {"line": 5, "character": 0},
                      "range": {"start": {"line": 0}, "end": {"line": 5_000_000}}})
    cut = next_edit_params(p)
    assert cut.edited is not None and cut.edited[1] - cut.edited[0] + 1 == MAX_EDITED_LINES and cut.edited[0] == 0
    with pytest.raises(LimitError):
        next_edit_params(parse_params({"textDocument": {"uri": "file:///a.py"},
                                       "position": {"line": 10**9, "character": 0}}))
    assert folder_uri("file:///home/u/repo") == "file:///home/u/repo"
    for bad in ("file:.", "file:repo", "file://evil/share", "http://x/y", "file:///a%00b", "", None, 5):
        assert folder_uri(bad) is None, bad
    index = WorkspaceIndex()
    index.set_roots(["file:.", "file:" + str(Path.cwd().name)])
    assert index.roots == []


@pytest.mark.asyncio(loop_scope="function")
async def test_framing_a_content_length_too_large_or_over_the_limit(tmp_path: Path) -> None:
    r = await initialized()
    try:
        # 100 MB announced, a small body sent: the next messages end it at once
        await r.write(b"Content-Length: 100000000\r\n\r\n" + json.dumps(request(7, "llada/debugInfo", {})).encode())
        for i in range(50):
            await r.write(msg(request(1000 + i, "llada/debugInfo", {})))
        t0 = time.monotonic()
        answered = [await r.answer(1000 + i, timeout=5) for i in range(50)]
        assert all("result" in a for a in answered) and time.monotonic() - t0 < 5
        # over the limit: refused with an error, the stream resyncs at the next header
        await r.write(b"Content-Length: 1099511627776\r\n\r\n{\"jsonrpc\": \"2.0\"}")
        await r.send_then_probe(b"", timeout=5)
        # a nextEdit over the bounds: Invalid Params at once
        await r.write(msg(request(9, "llada/nextEdit", {"textDocument": {"uri": "file:///nope.py"},
                                                       "position": {"line": 10**9, "character": 0}})))
        assert (await r.answer(9, timeout=5))["error"]["code"] == -32602
    finally:
        await stop(r)
