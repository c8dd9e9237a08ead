"""Machine-scoped settings (issue 31, item 6): `engine`, `engineToken`, `model` and `device` move
the user's text and token elsewhere or load programs, so a workspace cannot set them. Only
`initializationOptions` (the editor's user-level configuration) count; the same keys answered
to `workspace/configuration` or pushed in `didChangeConfiguration` are refused, once each
with a message, while the workspace's other settings still apply.

A fake engine daemon (a real websockets server on 127.0.0.1) records whatever reaches it: it
must receive nothing, neither the token in $LLADA_ENGINE_TOKEN nor the document text."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from lsprotocol import types as t

from llada_lsp.options import MACHINE_SCOPED, workspace_settings
from tests.llada_lsp.lsp_helpers import (
    complete_after,
    debug_info,
    needs_model,
    recording_daemon,
    server_session,
)

SECRET = "secret-token-of-the-user"


def test_workspace_settings_drop_every_machine_scoped_key() -> None:
    kept, refused = workspace_settings({"llada": {"engine": "ws://x", "engineToken": "t", "model": "/m",
                                                  "device": "cuda", "mode": "quality", "engine_token": "u"}})
    assert kept == {"mode": "quality"}
    assert set(refused) == {"engine", "engineToken", "model", "device", "engine_token"}
    assert {"engine", "engine_token", "model", "device", "threads"} <= MACHINE_SCOPED
    assert workspace_settings({"llada": {"threads": 8}}) == ({}, {"threads": 8})
    assert workspace_settings(None) == (None, {})


@needs_model
@pytest.mark.asyncio(loop_scope="function")
async def test_a_workspace_cannot_point_the_engine_elsewhere(tmp_path: Path) -> None:
    async with recording_daemon("EVIL()") as (url, received):
        workspace = {"llada": {"engine": url, "model": str(tmp_path), "device": "cuda", "mode": "quality",
                               "debounceMs": 3}}
        async with server_session({"engine": "inprocess", "speculative": False},
                                  lambda c: c.set_configuration(workspace),
                                  LLADA_ENGINE_TOKEN=SECRET, LLADA_RUNTIME_DIR=str(tmp_path)) as client:
            info = await debug_info(client)
            assert info["options"]["engine"] == "inprocess" and info["options"]["device"] == "cpu"
            assert info["options"]["model"] != str(tmp_path)
            assert info["options"]["mode"] == "quality" and info["options"]["debounce_ms"] == 3
            refused = [m.message for m in client.messages if "is ignored" in m.message]
            assert sorted(r.split("'")[1] for r in refused) == ["device", "engine", "model"], refused
            # pushed settings: refused too; the same value again is not shown again
            client.workspace_did_change_configuration(t.DidChangeConfigurationParams(
                settings={"llada": {"engine": url, "engineToken": "x", "languages": ["python"]}}))
            info = await debug_info(client)
            assert info["options"]["engine"] == "inprocess" and info["options"]["languages"] == ["python"]
            assert info["options"]["engine_token"] is None
            assert len([m for m in client.messages if "'engine'" in m.message]) == 1
            await asyncio.wait_for(complete_after(client, "        return math.", "scope.py"), 60)
            assert received == []  # neither the token nor the text left for the workspace's URL


@needs_model
@pytest.mark.asyncio(loop_scope="function")
async def test_the_threads_option_counts_from_initialization_options_only(tmp_path: Path) -> None:
    """`threads` fixes the in-process engine's torch threads (issue 50); a workspace's value is
    refused like every machine-scoped key."""
    async with server_session({"engine": "inprocess", "threads": 1, "speculative": False},
                              lambda c: c.set_configuration({"llada": {"threads": 2}}),
                              LLADA_RUNTIME_DIR=str(tmp_path)) as client:
        info = await debug_info(client)
        assert info["options"]["threads"] == 1
        ready = [s for s in client.statuses if s["state"] == "ready"]
        assert ready and ready[-1]["engine"]["threads"] == 1 and ready[-1]["engine"]["threads_fixed"] is True
        assert any("'threads'" in m.message and "is ignored" in m.message for m in client.messages)
