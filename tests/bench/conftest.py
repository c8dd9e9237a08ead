"""Fixtures of the bench tests: the language-server benches' `model_dir` is the one of
tests/llada_lsp/conftest.py (a fixture imported into a conftest is registered)."""

from tests.llada_lsp.conftest import model_dir  # noqa: F401
