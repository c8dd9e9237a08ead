"""End-to-end helpers: the real server over stdio, the real engine and model.

The model directory is $LLADA_MODEL, else the embedded checkpoint; without either the tests
that need it fail with a message saying so. One server per test module (loading the model is the slow
part); tests in a module share it and open their own documents.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import pytest_lsp
from lsprotocol import types as t
from pygls.protocol import default_converter
from pytest_lsp import ClientServerConfig, LanguageClient
from pytest_lsp.client import register_lsp_features

from llada_lsp.client import (  # noqa: F401 - the tests' helpers, shared with the demo and benches
    SERVER,
    capabilities,
    completion_id,
    debug_info,
    first_text,
    inline,
    item_texts,
    open_document,
    plain,
)
from llada_lsp.client import Recorder as LladaRecorder

to_plain = plain

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


class Recorder(LladaRecorder, LanguageClient):
    """The test client: pytest-lsp's, recording the server's llada/* notifications."""


def make_client() -> Recorder:
    client = Recorder(converter_factory=default_converter)
    register_lsp_features(client)
    return client


def session_fixture(init: dict[str, Any], command: list[str] | None = None,
                    encodings: list[str] | None = None) -> Any:
    """A module's `client` fixture: the real server (or `command`) started with these
    initializationOptions, the model loaded, shut down after the module's tests."""
    @pytest_lsp.fixture(config=server_config(command), scope="module")
    async def client(lsp_client: Recorder) -> Any:
        await start_session(lsp_client, init, encodings=encodings)
        yield
        await lsp_client.shutdown_session()

    return client


def server_config(command: list[str] | None = None, **env: str) -> ClientServerConfig:
    """The real server over stdio (`command`: another launcher of it, for fault injection)."""
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", **env}
    if MODEL is not None:
        full_env["LLADA_MODEL"] = str(MODEL)
    cmd = command or list(SERVER)
    return ClientServerConfig(server_command=[*cmd, "-v"], client_factory=make_client,
                              server_env=full_env)


async def poll(fn: Callable[[], Any], timeout: float = 30.0, interval: float = 0.02) -> Any:
    """Await until fn() is truthy (fn may be async); return its value. For server state that
    no notification announces (debugInfo counters); a notification: `Recorder.until`."""
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


async def start_session(client: Recorder, init_options: dict[str, Any] | None = None,
                        encodings: list[str] | None = None) -> None:
    require_model()
    client.init_result = await client.initialize_session(t.InitializeParams(
        capabilities=capabilities(encodings or ["utf-16"], progress=True, configuration=True),
        root_uri=DATA.as_uri(), initialization_options=init_options or {}))
    status = await client.engine_settled(timeout=120)
    if status["state"] == "error":
        info = await debug_info(client)
        raise RuntimeError(f"engine failed: {info.get('engineError')}")


@contextlib.asynccontextmanager
async def server_session(init: dict[str, Any] | None = None, configure: Callable[[Recorder], None] | None = None,
                         **env: str) -> AsyncIterator[Recorder]:
    """One test's own server (`server_config(**env)`): `configure` runs before initialize
    (e.g. the workspace's settings), then `start_session(init)`; on exit it is shut down and
    stopped whatever happened (teardown goes on past a failed shutdown)."""
    client = await server_config(**env).start()
    try:
        if configure is not None:
            configure(client)
        await start_session(client, init)
        yield client
    finally:
        with contextlib.suppress(Exception):  # noqa: BLE001 - teardown goes on
            await asyncio.wait_for(client.shutdown_session(), 10)
        await client.stop()

def open_doc(client: LanguageClient, path: Path | str, language_id: str,
             text: str | None = None, uri: str | None = None) -> str:
    path = Path(path)
    uri = uri or (path.as_uri() if path.is_absolute() else (DATA / path).as_uri())
    open_document(client, uri, language_id, text if text is not None else (DATA / path).read_text())
    return uri


async def complete_after(client: LanguageClient, needle: str, copy: str, source: str = "shapes.py.txt",
                         language_id: str = "python") -> tuple[str, t.InlineCompletionList | None]:
    """DATA/`source` opened as DATA/`copy` (a document of its own) and an inline completion asked
    right after `needle` in it: (the copy's uri, the answer)."""
    text = (DATA / source).read_text()
    uri = open_doc(client, source, language_id, text=text, uri=(DATA / copy).as_uri())
    return uri, await inline(client, uri, position_of(text, needle))

def position_of(text: str, needle: str, *, end: bool = True, delta: int = 0) -> t.Position:
    """LSP position (UTF-16 = str offsets for these ASCII files) after/at `needle`."""
    i = text.index(needle) + (len(needle) if end else 0) + delta
    line = text.count("\n", 0, i)
    return t.Position(line, i - (text.rfind("\n", 0, i) + 1))


async def final_refine(client: Recorder, cid: str) -> dict[str, Any]:
    """The final `llada/refine` of completion `cid` (waits for it)."""
    return await client.final_refine(cid, 60)


@contextlib.asynccontextmanager
async def recording_daemon(done_text: str = "") -> AsyncIterator[tuple[str, list[str]]]:
    """A websocket server on 127.0.0.1 that answers like an engine daemon (a hello, then
    `done_text` for every completion) and records every message it receives: (url, messages)."""
    from websockets.asyncio.server import ServerConnection, serve

    received: list[str] = []

    async def handler(ws: ServerConnection) -> None:
        async for raw in ws:
            received.append(str(raw))
            m = json.loads(raw)
            if m.get("type") == "hello":
                await ws.send(json.dumps({"type": "hello", "ref": m.get("ref"), "protocol": 1, "pid": 1,
                                          "model": {"model": "recorder"}}))
            elif m.get("type") == "complete":
                await ws.send(json.dumps({"type": "done", "id": m["id"], "text": done_text, "step": 1}))

    async with serve(handler, "127.0.0.1", 0) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        yield f"ws://127.0.0.1:{port}", received
