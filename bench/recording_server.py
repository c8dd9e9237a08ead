"""llada-lsp with every request its engine loop admits appended to a JSON-lines file.

`bench/draft_replay.py --record` starts it in place of `python -m llada_lsp` (through
`bench/lsp_latency.py --server-script`), with the file in $LLADA_BENCH_RECORD: the engine
requests of a real typing session, for replaying through one checkout's engine or another's.
Nothing else changes: the requests are written as `dataclasses.asdict` gives them, then
submitted as usual (a remask is not recorded).
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Literal

from engine.api import CompletionRequest
from engine.decoding.scheduler import Scheduler
from llada_lsp.cli import main

OUT = open(os.environ["LLADA_BENCH_RECORD"], "a", encoding="utf-8")  # noqa: SIM115 - open for the server's life
SUBMIT = Scheduler.submit


def recorded_submit(self: Scheduler, req: CompletionRequest, owner: Any, emit: Any,
                    deadline_ms: int | None = None, op: Literal["complete", "remask"] = "complete",
                    **kwargs: Any) -> Any:
    if op == "complete":
        OUT.write(json.dumps(dataclasses.asdict(req)) + "\n")
        OUT.flush()
    return SUBMIT(self, req, owner, emit, deadline_ms, op=op, **kwargs)


Scheduler.submit = recorded_submit  # type: ignore[method-assign,assignment]

if __name__ == "__main__":
    raise SystemExit(main())
