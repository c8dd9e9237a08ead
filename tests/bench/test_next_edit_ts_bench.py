"""bench/next_edit_ts.py's scoring at its smallest: one hand-made file and the rename locations
TypeScript's language service gives for it (the format its oracle script writes; the bench
itself installs TypeScript and the package with npm, which tests do not)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from bench.next_edit_ts import ORACLE, run_tasks

SRC = "function f(message: string, n: number) {\n  log(message);\n  return { message, n };\n}\n"


def test_scoring_counts_a_shorthand_property_by_its_prefixed_text(tmp_path: Path) -> None:
    path = tmp_path / "a.ts"
    path.write_text(SRC)
    at = SRC.index("message:")
    task = {"file": str(path), "name": "message", "at": at, "kind": "param", "locs": [
        {"start": at, "length": 7, "prefix": "", "suffix": ""},
        {"start": SRC.index("message);"), "length": 7, "prefix": "", "suffix": ""},
        {"start": SRC.index("message, n }"), "length": 7, "prefix": "message: ", "suffix": ""}]}
    res = run_tasks([task])
    assert res["true_sites"] == 2 and res["found"] == 2 and res["precision"] == 1.0 and res["recall"] == 1.0
    assert res["per_kind"] == {"other": {"sites": 1, "recall": 1.0}, "shorthand": {"sites": 1, "recall": 1.0}}
    # a location the analysis does not reach (a string's text, say) lowers the recall, not the precision
    task["locs"].append({"start": SRC.index("log"), "length": 3, "prefix": "", "suffix": ""})
    res = run_tasks([task])
    assert res["found"] == 2 and res["true_sites"] == 3 and res["precision"] == 1.0


def test_the_oracle_script_is_valid_javascript(tmp_path: Path) -> None:
    script = tmp_path / "oracle.js"
    script.write_text(ORACLE)
    subprocess.run(["node", "--check", str(script)], check=True, timeout=60)
