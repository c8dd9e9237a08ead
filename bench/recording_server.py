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
from typing import Any

from engine.api import CompletionRequest
from engine.decoding.scheduler import Scheduler
from llada_lsp.cli import main

OUT = open(os.environ["LLADA_BENCH_RECORD"], "a", encoding="utf-8")  # noqa: SIM115 - open for the server's life
SUBMIT = Scheduler.submit


def recorded_submit(self: Scheduler, req: CompletionRequest, *args: Any, **kwargs: Any) -> Any:
    if kwargs.get("op", "complete") == "complete" and (len(args) < 4 or args[3] == "complete"):
        OUT.write(json.dumps(dataclasses.asdict(req)) + "\n")
        OUT.flush()
    return SUBMIT(self, req, *args, **kwargs)


Scheduler.submit = recorded_submit  # type: ignore[method-assign]

if __name__ == "__main__":
    raise SystemExit(main())
