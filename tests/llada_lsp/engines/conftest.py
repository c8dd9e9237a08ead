"""Fixtures of the SGLang backend tests (helpers in sglang_helpers.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.llada_lsp.engines.sglang_helpers import llada2_dir


@pytest.fixture
def tok(tmp_path: Path) -> Path:
    """A fake LLaDA2 checkpoint directory: the local tokenizer of the SGLang client."""
    return llada2_dir(tmp_path / "llada2")
