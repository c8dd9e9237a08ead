"""Fixtures of the bench tests: the language-server benches' `model_dir` is the one of
tests/llada_lsp/conftest.py (a fixture imported into a conftest is registered). Every test
here gets the bench watchdog (tests/bench/watchdog.py) as its timeout."""

from pathlib import Path

import pytest

from tests.bench.watchdog import WATCHDOG_S
from tests.llada_lsp.conftest import model_dir  # noqa: F401

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.path)).resolve().parents and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(WATCHDOG_S))
