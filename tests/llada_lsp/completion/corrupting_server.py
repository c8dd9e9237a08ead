"""`llada-lsp` with a fault injected into its in-process engine, for the syntax-guided edit
test: while drafting a completion (not while re-masking), the engine's text gets " = :"
appended to its first non-blank line, so the draft the server sees adds a parse error. The
engine's own tokens stay intact, so re-masking the error's span really re-decodes them.

    python tests/llada_lsp/completion/corrupting_server.py [llada-lsp options]
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from engine.api import EngineEvent  # noqa: E402
from llada_lsp import cli  # noqa: E402
from llada_lsp.engines.engine_client import EngineJob, InProcessEngine  # noqa: E402
from llada_lsp.lsp import server

MARK = " = :"


def corrupt(text: str) -> str:
    lines = text.split("\n")
    for i, line in enumerate(lines):
        if line.strip():
            lines[i] = line + MARK
            return "\n".join(lines)
    return text


class CorruptingEngine(InProcessEngine):
    def _run(self, op: str, job: EngineJob, spans: Any) -> None:
        if op == "complete":
            push = job.push

            def corrupted(ev: EngineEvent) -> None:
                push(dataclasses.replace(ev, text=corrupt(ev.text), edits=()))

            job.push = corrupted  # type: ignore[method-assign]
        super()._run(op, job, spans)


def factory(location: str, *, model_dir: str | None, mode: str, device: str,
            token: str | None = None) -> CorruptingEngine:
    return CorruptingEngine(model_dir, mode=mode, device=device)


if __name__ == "__main__":
    server.server.engine_factory = factory
    raise SystemExit(cli.main(sys.argv[1:]))
