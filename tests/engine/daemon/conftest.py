"""Fixtures of the daemon tests (helpers in daemon_helpers.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.engine.daemon.daemon_helpers import (
    Daemon,
    build_tiny_checkpoint,
    start_daemon,
    stop_daemon,
)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_checkpoint(tmp_path_factory.mktemp("tiny-model"))


@pytest.fixture(scope="module")
def daemon(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    d = start_daemon(tmp_path_factory.mktemp("run"), tiny_model_dir, "--max-batch", "3", "--prompt-cache", "0",
                     "--max-prompt-tokens", "256", "--max-prompt-chars", "4096", "--max-message-bytes", "65536")
    yield d
    stop_daemon(d)
