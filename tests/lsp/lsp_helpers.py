"""End-to-end helpers: the real server over stdio, the real engine and model.

The model directory is $LLADA_MODEL, else the embedded checkpoint; without either the tests
that need it fail with a message saying so. One server per test module (loading the model is the slow
part); tests in a module share it and open their own documents.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import pytest_lsp
from lsprotocol import types as t
from pygls.protocol import default_converter
from pytest_lsp import ClientServerConfig, LanguageClient
from pytest_lsp.client import register_lsp_features

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).resolve().parent / "data"


EMBEDDED = ROOT / "engine/checkpoints/tiny-code"


def find_model() -> tuple[Path | None, str]:
    """($LLADA_MODEL, else the embedded checkpoint; or None and what is wrong)."""
    env = os.environ.get("LLADA_MODEL")
    if env:
        if (Path(env) / "config.json").exists():
            return Path(env), ""
        return None, f"LLADA_MODEL={env} is not a model directory (no config.json)"
    if (EMBEDDED / "config.json").exists():
        return EMBEDDED, ""
    return None, (f"no model for the end-to-end tests: the embedded checkpoint {EMBEDDED} is "
                  "missing (no config.json) and LLADA_MODEL is not set. Set LLADA_MODEL to a "
                  "model directory (e.g. runs/embedded/latest while training).")


MODEL, MODEL_PROBLEM = find_model()


def require_model() -> Path:
    """The model directory, or fail the test (never skip) with what is missing."""
    if MODEL is None:
        pytest.fail(MODEL_PROBLEM, pytrace=False)
    return MODEL


# tests that need the model fail (in setup) when it is missing: see conftest.py
needs_model = pytest.mark.usefixtures("model_dir")


def to_plain(obj: Any) -> Any:
    """pygls hands custom-message params over as namedtuples: back to dicts and lists."""
    if hasattr(obj, "_asdict"):
        return {k: to_plain(v) for k, v in obj._asdict().items()}
    if isinstance(obj, (list, tuple)):
        return [to_plain(v) for v in obj]
    return obj


class Recorder(LanguageClient):
    """The test client, recording the server's llada/* notifications."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.refines: list[dict[str, Any]] = []
        self.stats: list[dict[str, Any]] = []
        self.statuses: list[dict[str, Any]] = []
        self.init_result: t.InitializeResult | None = None


def make_client() -> Recorder:
    client = Recorder(converter_factory=default_converter)
    register_lsp_features(client)

    @client.feature("llada/refine")
    def _refine(ls: Recorder, params: Any) -> None:
        ls.refines.append(to_plain(params))

    @client.feature("llada/stats")
    def _stats(ls: Recorder, params: Any) -> None:
        ls.stats.append(to_plain(params))

    @client.feature("llada/status")
    def _status(ls: Recorder, params: Any) -> None:
        ls.statuses.append(to_plain(params))

    return client


def session_fixture(init: dict[str, Any], command: list[str] | None = None,
                    encodings: list[str] | None = None) -> Any:
    """A module's `client` fixture: the real server (or `command`) started with these
    initializationOptions, the model loaded, shut down after the module's tests."""
    @pytest_lsp.fixture(config=server_config(command), scope="module")
    async def client(lsp_client: LanguageClient) -> Any:
        await start_session(lsp_client, init, encodings=encodings)
        yield
        await lsp_client.shutdown_session()

    return client


def server_config(command: list[str] | None = None, **env: str) -> ClientServerConfig:
    """The real server over stdio (`command`: another launcher of it, for fault injection)."""
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", **env}
    if MODEL is not None:
        full_env["LLADA_MODEL"] = str(MODEL)
    cmd = command or [sys.executable, "-m", "llada_lsp"]
    return ClientServerConfig(server_command=[*cmd, "-v"], client_factory=make_client,
                              server_env=full_env)


async def poll(fn: Callable[[], Any], timeout: float = 30.0, interval: float = 0.02) -> Any:
    """Await until fn() is truthy (fn may be async); return its value."""
    deadline = time.monotonic() + timeout
    while True:
        value = fn()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"condition not met within {timeout}s")
        await asyncio.sleep(interval)


async def debug_info(client: LanguageClient) -> dict[str, Any]:
    return to_plain(await client.protocol.send_request_async("llada/debugInfo", {}))


async def start_session(client: LanguageClient, init_options: dict[str, Any] | None = None,
                        encodings: list[str] | None = None) -> None:
    require_model()
    caps = t.ClientCapabilities(
        general=t.GeneralClientCapabilities(position_encodings=encodings or ["utf-16"]),
        window=t.WindowClientCapabilities(work_done_progress=True),
        workspace=t.WorkspaceClientCapabilities(configuration=True),
        text_document=t.TextDocumentClientCapabilities(
            inline_completion=t.InlineCompletionClientCapabilities()))
    client.init_result = await client.initialize_session(t.InitializeParams(
        capabilities=caps, root_uri=DATA.as_uri(),
        initialization_options=init_options or {}))

    async def ready() -> bool:
        info = await debug_info(client)
        if info.get("engineState") == "error":
            raise RuntimeError(f"engine failed: {info.get('engineError')}")
        return info.get("engineState") == "ready"

    await poll(ready, timeout=120, interval=0.1)


def open_doc(client: LanguageClient, path: Path | str, language_id: str,
             text: str | None = None, uri: str | None = None) -> str:
    path = Path(path)
    uri = uri or (path.as_uri() if path.is_absolute() else (DATA / path).as_uri())
    body = text if text is not None else (DATA / path).read_text()
    client.text_document_did_open(t.DidOpenTextDocumentParams(
        t.TextDocumentItem(uri=uri, language_id=language_id, version=1, text=body)))
    return uri


def position_of(text: str, needle: str, *, end: bool = True, delta: int = 0) -> t.Position:
    """LSP position (UTF-16 = str offsets for these ASCII files) after/at `needle`."""
    i = text.index(needle) + (len(needle) if end else 0) + delta
    line = text.count("\n", 0, i)
    return t.Position(line, i - (text.rfind("\n", 0, i) + 1))


async def inline(client: LanguageClient, uri: str, pos: t.Position, invoked: bool = False,
                 selected: t.SelectedCompletionInfo | None = None) -> t.InlineCompletionList | None:
    """An inline completion request: Automatic (as editors send while typing) or Invoked;
    `selected`: the item selected in the editor's completion widget."""
    kind = t.InlineCompletionTriggerKind.Invoked if invoked else t.InlineCompletionTriggerKind.Automatic
    res = await client.text_document_inline_completion_async(t.InlineCompletionParams(
        text_document=t.TextDocumentIdentifier(uri), position=pos,
        context=t.InlineCompletionContext(trigger_kind=kind, selected_completion_info=selected)))
    assert res is None or isinstance(res, t.InlineCompletionList)
    return res


def item_texts(res: t.InlineCompletionList | None) -> list[str]:
    """The insert texts of an inline completion answer's items, in order."""
    return [i.insert_text if isinstance(i.insert_text, str) else i.insert_text.value
            for i in (res.items if res else [])]


def first_text(res: t.InlineCompletionList | None) -> str:
    texts = item_texts(res)
    return texts[0] if texts else ""


def completion_id(res: t.InlineCompletionList | None) -> str | None:
    """The completion id in the first item's accept command."""
    if not res or not res.items or res.items[0].command is None:
        return None
    return str(res.items[0].command.arguments[0])


async def final_refine(client: Any, cid: str) -> dict[str, Any]:
    """The final `llada/refine` of completion `cid` (waits for it)."""
    return await poll(lambda: next((r for r in client.refines
                                    if r["completionId"] == cid and r["final"]), None), 60)
