"""A SCRIPTED engine: every completion is answered with fixed texts, chosen by how the
request's prefix ends. For the parse-error guard (issue 51): the tests and bench/guard.py
need a deliberately bad candidate list that no model would give on cue.

A script is a list of rules, the first whose `after` ends the request's prefix applies:

    {"after": "return ", "drafts": ["x + 1"], "done": "raise", "alternatives": ["x", "y"]}

`drafts` are streamed as complete drafts, then `done` (default: the last draft) with as many
of `alternatives` as the plan asks candidates (`Plan.alternatives`, as the native engine
decodes them). Every text is cut at the plan's stop rule with the engine's own
`engine.decoding.stops.cut_text`, as every real engine sends it (docs/protocol.md: the one
place the rule is applied). No rule: an empty answer. What it does not model: timing (every event is
queued at submit), token counts, remask (none), cancellation mid-stream.

As a process, `python tests/fakes/scripted_engine.py [llada-lsp options]` runs the real
`llada-lsp` with this engine; the script is the JSON in $LLADA_SCRIPT.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from engine.api import CompletionRequest, EngineEvent  # noqa: E402
from engine.decoding.stops import cut_text  # noqa: E402
from llada_lsp.engines.engine_base import EngineClient, EngineJob, Progress  # noqa: E402

Rule = dict[str, Any]


class ScriptedEngine(EngineClient):
    def __init__(self, rules: Sequence[Rule]) -> None:
        super().__init__()
        self.rules = list(rules)
        self.requests: list[CompletionRequest] = []
        self.info = {"backend": "scripted", "remask": False}

    async def start(self, progress: Progress) -> None:
        self.set_state("ready")

    def rule(self, request: CompletionRequest) -> Rule:
        return next((r for r in self.rules if request.prefix.endswith(r["after"])), {})

    def submit(self, request: CompletionRequest) -> EngineJob:
        self.requests.append(request)
        self.counters["submitted"] += 1
        rule = self.rule(request)
        plan = request.plan
        drafts = [cut_text(d, plan)[0] for d in rule.get("drafts", [])]
        done = cut_text(rule.get("done", drafts[-1] if drafts else ""), plan)[0]
        wanted = max(1, plan.alternatives or 1)
        cut = [cut_text(a, plan)[0] for a in rule.get("alternatives", [])]
        alternatives = tuple(a for a in cut if a != done)[: wanted - 1]
        job = EngineJob(request, asyncio.get_running_loop())
        rid = request.request_id
        for step, text in enumerate(drafts, 1):
            job.push(EngineEvent("draft", rid, text, step=step, draft_complete=True))
        job.push(EngineEvent("done", rid, done, step=len(drafts) + 1, draft_complete=True, reason="stop_rule",
                             stats={"forwards": len(drafts) + 1}, alternatives=alternatives))
        job.finished = True
        return job

    async def close(self) -> None:
        return None


def factory(location: str, **_: Any) -> ScriptedEngine:
    return ScriptedEngine(json.loads(os.environ.get("LLADA_SCRIPT", "[]")))


if __name__ == "__main__":
    from llada_lsp import cli
    from llada_lsp.lsp import server

    server.server.engine_factory = factory
    raise SystemExit(cli.main(sys.argv[1:]))
