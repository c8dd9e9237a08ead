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

from engine.api import CompletionRequest, EngineEvent  # noqa: E402
from llada_lsp import cli  # noqa: E402
from llada_lsp.engines.engine_base import J  # noqa: E402
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


class DraftJob(EngineJob):
    """A completion's job (not a re-mask's): its events reach the server corrupted."""


class CorruptingEngine(InProcessEngine):
    """Every event of a `submit`ted job has its text corrupted on its way to the server; a
    `remask` job's events pass as they are. `new_job` is called on the event loop inside
    `submit` / `remask`, before the job reaches the engine's thread, so the job's type is
    fixed before any event of it exists."""

    drafting = False

    def submit(self, request: CompletionRequest) -> EngineJob:
        self.drafting = True
        try:
            return super().submit(request)
        finally:
            self.drafting = False

    def new_job(self, request: CompletionRequest, job_type: type[J], **fields: Any) -> J:
        return super().new_job(request, DraftJob if self.drafting else job_type, **fields)  # type: ignore[arg-type]

    def deliver(self, job: EngineJob, ev: EngineEvent) -> None:
        if isinstance(job, DraftJob):
            ev = dataclasses.replace(ev, text=corrupt(ev.text))
        super().deliver(job, ev)


def factory(location: str, *, model_dir: str | None, mode: str, device: str,
            token: str | None = None, **_: Any) -> CorruptingEngine:
    return CorruptingEngine(model_dir, device=device)


if __name__ == "__main__":
    server.server.engine_factory = factory
    raise SystemExit(cli.main(sys.argv[1:]))
