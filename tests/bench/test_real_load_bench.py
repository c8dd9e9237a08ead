"""bench/real_load.py at its smallest size, end to end (it had stopped running when a helper it
imported from tests/ was renamed), and the rule that keeps benches runnable: a bench imports
from tests/ only `tests.fakes`, and tests/fakes imports nothing else from tests/."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.bench.watchdog import WATCHDOG_S

ROOT = Path(__file__).resolve().parents[2]


def _test_imports(path: Path) -> list[str]:
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
        elif isinstance(node, ast.Import):
            names.extend(a.name for a in node.names)
    return [n for n in names if (n == "tests" or n.startswith("tests.")) and not n.startswith("tests.fakes")]


def test_no_bench_imports_from_tests_outside_fakes() -> None:
    files = sorted(ROOT.glob("bench/**/*.py")) + sorted(ROOT.glob("tests/fakes/**/*.py"))
    assert len(files) > 20
    bad = {str(f.relative_to(ROOT)): m for f in files if (m := _test_imports(f))}
    assert bad == {}


@pytest.mark.parametrize("family", ["llada-8b", "llada-moe"])
def test_real_load_bench_smoke(family: str) -> None:
    out = subprocess.run([sys.executable, "bench/real_load.py", "--smoke", "--family", family, "--threads", "1",
                          "--max-tokens", "8"], cwd=ROOT, capture_output=True, text=True, timeout=WATCHDOG_S)
    assert out.returncode == 0, out.stderr[-3000:]
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert res["bench"] == "real_load" and res["float32_refused"] is True
    assert res["inprocess"]["dtype"] == "bfloat16" and res["inprocess"]["forwards"] >= 1
    assert res["daemon"]["forwards"] >= 1 and res["weights_bytes"] > 0
