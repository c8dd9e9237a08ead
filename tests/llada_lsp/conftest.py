"""Fixtures of the language server tests (helpers in lsp_helpers.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.llada_lsp.lsp_helpers import require_model


@pytest.fixture(scope="session")
def model_dir() -> Path:
    """The model of the end-to-end tests; a missing model fails them (it is no reason to skip)."""
    return require_model()
