"""Secrets and other projects never reach the prompt (issue 49 §2, §4; SECURITY.md "Secrets"):
the context of a completion (llada_lsp.context.workspace, real tree-sitter, real files) takes
other open documents only inside a workspace folder, neither secret nor gitignored, and of a
compatible language; the index skips gitignored and secret-named files and names with control
or format characters; a workspace cannot raise the index's limits over the user's, nor drop
the user's `exclude` patterns."""

from __future__ import annotations

import unicodedata
from pathlib import Path

import pytest

from llada_lsp.context.exclusions import DEFAULT_EXCLUDES, compatible
from llada_lsp.context.safe_files import utf8_name
from llada_lsp.context.workspace import WorkspaceContext
from llada_lsp.context.workspace_index import WorkspaceIndex
from llada_lsp.lsp.server import LladaServer
from llada_lsp.options import Options
from llada_lsp.text.documents import DocumentStore

MARKER = "CANARY-49b-d41d8"
APP = "from lib.helper import scale_point\n\n\ndef main(p):\n    q = scale_point(p) + leak_a() + leak_b()\n    return "


def _leak(name: str) -> str:
    return f"def {name}():\n    return '{MARKER}'\n"


def workspace(tmp_path: Path) -> tuple[Path, Path]:
    ws, outside = tmp_path / "ws", tmp_path / "outside"
    (ws / "lib").mkdir(parents=True)
    outside.mkdir()
    (ws / "lib" / "helper.py").write_text("def scale_point(p):\n    return p * 2\n")
    (ws / ".gitignore").write_text("secrets_local.py\n")
    (ws / "secrets_local.py").write_text(_leak("leak_a"))
    (ws / "lib" / ".gitignore").write_text("*_private.py\n")
    (ws / "lib" / "keys_private.py").write_text(_leak("leak_b"))
    (ws / ".env.py").write_text(_leak("leak_b"))
    return ws, outside


def context_text(ctx: WorkspaceContext, store: DocumentStore, uri: str) -> str:
    doc = store.get(uri)
    return "\n".join(f"{c.path}\n{c.text}" for c in ctx.chunks_for(doc, len(doc.text), "", 100_000))


def test_open_documents_count_only_inside_the_workspace_unexcluded_and_compatible(tmp_path: Path) -> None:
    ws, outside = workspace(tmp_path)
    store = DocumentStore()
    app = (ws / "app.py").as_uri()
    store.open(app, "python", 1, APP)
    tabs = [
        ((ws / ".env").as_uri(), "dotenv", f"API_KEY={MARKER}\n"),
        ((ws / "id_rsa").as_uri(), "plaintext", f"-----BEGIN OPENSSH PRIVATE KEY-----\n{MARKER}\n"),
        ((ws / "deploy" / "server.pem").as_uri(), "plaintext", f"{MARKER}\n"),
        ((ws / "secrets_local.py").as_uri(), "python", _leak("leak_a")),  # gitignored
        ((outside / ".aws" / "credentials").as_uri(), "ini", f"aws_secret_access_key={MARKER}\n"),
        ((outside / "other_project.py").as_uri(), "python", _leak("leak_a")),  # another project
        ("untitled:Untitled-1", "python", _leak("leak_b")),
        ((ws / "NOTES.md").as_uri(), "markdown", f"# notes\n{MARKER}\n"),  # another language
        ((ws / "web" / "client.ts").as_uri(), "typescript", f"export const k = '{MARKER}'\n"),
        ((ws / "c\u0085trl.py").as_uri(), "python", _leak("leak_b")),  # a control character in its name
    ]
    for uri, lang, text in tabs:
        store.open(uri, lang, 1, text)
    good_tab = (ws / "lib" / "tab_ok.py").as_uri()
    store.open(good_tab, "python", 1, "def tab_helper(x):\n    return x - 1\n")
    ctx = WorkspaceContext(store)
    ctx.set_roots([ws.as_uri()])
    assert ctx.index.scan("python") >= 1
    got = context_text(ctx, store, app)
    assert MARKER not in got
    assert "def scale_point" in got and "def tab_helper" in got  # the legitimate context arrives
    assert ctx.index.lookup("leak_a") == [] and ctx.index.lookup("leak_b") == []  # not indexed either


def test_the_language_families(tmp_path: Path) -> None:
    ws = tmp_path
    store = DocumentStore()
    store.open((ws / "a.tsx").as_uri(), "typescriptreact", 1, "const x = 1\n")
    store.open((ws / "b.js").as_uri(), "javascript", 1, "function fromJs() { return 1 }\n")
    store.open((ws / "c.py").as_uri(), "python", 1, "def from_py():\n    return 1\n")
    store.open((ws / "d.json").as_uri(), "json", 1, '{"from_json": 1}\n')
    ctx = WorkspaceContext(store)
    ctx.set_roots([ws.as_uri()])
    got = context_text(ctx, store, (ws / "a.tsx").as_uri())
    assert "fromJs" in got and "from_py" not in got and "from_json" not in got
    assert compatible("cpp", "c") and compatible("c", "cpp") and not compatible("python", "plaintext")
    assert not compatible("markdown", "python") and compatible("json", "json")


def test_a_secret_document_gathers_nothing(tmp_path: Path) -> None:
    ws, _ = workspace(tmp_path)
    store = DocumentStore()
    env = (ws / ".env").as_uri()
    store.open(env, "dotenv", 1, "API_KEY=")
    store.open((ws / "lib" / "tab_ok.py").as_uri(), "python", 1, "def tab_helper(x):\n    return x\n")
    ctx = WorkspaceContext(store)
    ctx.set_roots([ws.as_uri()])
    assert ctx.secret(env) and not ctx.secret((ws / "app.py").as_uri())
    assert context_text(ctx, store, env) == ""


def test_user_patterns_add_to_the_defaults(tmp_path: Path) -> None:
    ws, _ = workspace(tmp_path)
    (ws / "internal").mkdir()
    (ws / "internal" / "pricing.py").write_text(_leak("leak_a"))
    index = WorkspaceIndex()
    index.exclusions.set_user_globs(["internal/", "!.env.py"])  # a `!` cannot re-include a default
    index.set_roots([ws.as_uri()])
    index.scan("python")
    assert index.lookup("leak_a") == [] and index.lookup("leak_b") == []
    assert index.lookup("scale_point") != []
    assert ".env" in DEFAULT_EXCLUDES and "*.pem" in DEFAULT_EXCLUDES


CONTROLS = ["\u0085", "\u009b", "\u0080", "\u009f", "\u2028", "\u2029", "\u202e", "\u200f", "\u2066",
            "\u061c", "\ufeff", "\u00ad", "\x1b", "\x7f"]


@pytest.mark.parametrize("ch", CONTROLS, ids=[f"U+{ord(c):04X}" for c in CONTROLS])
def test_names_with_control_or_format_characters_are_skipped(tmp_path: Path, ch: str) -> None:
    assert unicodedata.category(ch) in {"Cc", "Cf", "Zl", "Zp"}
    assert not utf8_name(f"a{ch}b.py")
    (tmp_path / f"x{ch}y.py").write_text(_leak("leak_a"))
    (tmp_path / "ok_é_名.py").write_text("def fine_name():\n    return 1\n")  # printable non-ASCII is fine
    index = WorkspaceIndex()
    index.set_roots([tmp_path.as_uri()])
    index.scan("python")
    assert index.lookup("leak_a") == [] and index.lookup("fine_name") != []


def test_a_workspace_cannot_raise_the_index_limits_or_drop_excludes() -> None:
    ls = LladaServer()
    ls.apply_options({"workspaceIndex": {"maxBytes": 8 << 20}, "exclude": ["*.sqlite"]})
    ls.apply_workspace_options({"workspaceIndex": {"maxBytes": 256 << 20, "maxFiles": 100_000}, "exclude": []})
    assert ls.options.workspace_index.max_bytes == 8 << 20
    assert ls.options.workspace_index.max_files == Options().workspace_index.max_files  # the user's: the default
    assert ls.options.exclude == ["*.sqlite"]
    ls.apply_workspace_options({"workspaceIndex": {"maxBytes": 1 << 20}, "exclude": ["generated/"]})
    assert ls.options.workspace_index.max_bytes == 1 << 20  # lowering is fine
    assert ls.options.exclude == ["*.sqlite", "generated/"]  # adding is fine
