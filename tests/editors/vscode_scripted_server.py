"""The real `llada-lsp` with a scripted engine, for the real-VS-Code tests
(tests/editors/test_vscode_real.py). Every completion request gets the same script: a first
complete draft, then two refinements (engine "edit" events the server turns into
`llada/refine`), then done. Refinement k waits until the test creates `go-<k>` in the control
directory ($LLADA_SCRIPT_DIR), and the engine writes `pushed-<k>` there (the wall-clock time,
in ms, when the event left the engine), so the test can time each refinement's way to the
screen. An explicitly invoked request (cycling) gets the other candidates on its done event.
The server writes `sent-<k>` (ms) once it has written the `llada/refine` of refinement k, and
`sent-final` once it has written a finished request's final one. While the test keeps
`answer-unparsable` in the control directory, every request is answered at once with
UNPARSABLE, which the server's syntax check empties (an empty answer, `shown: false`).
Differences from the real engine: no model; texts fixed; `step` counts script steps.

`llada/nextEdit` is the real server's (its edit analysis needs no model). A scripted answer
stands in for it while the test keeps `next-edit.json` ({kind, detail, suggestions}) in the
control directory: an answer of that kind and detail gets those suggestions instead (the
version stays the real answer's). The clients' placeholder cases use it to draw a
placeholder (`placeholder`, `source: "placeholder"`: docs/lsp.md) from a server that may not
send one yet.

    python tests/editors/vscode_scripted_server.py [llada-lsp options]
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from engine.api import CompletionRequest, EngineEvent  # noqa: E402
from llada_lsp import cli  # noqa: E402
from llada_lsp.engines.engine_base import EngineClient, EngineJob, Progress  # noqa: E402
from llada_lsp.lsp import server
from llada_lsp.nextedit.next_edit import Answer, NextEditParams, NextEditService  # noqa: E402

STEPS = ("width + height", "width * height", "width * height * depth")  # draft, refinement 1, 2
OTHERS = ("height * width", "max(width, height)")  # the candidates an invoked request adds
UNPARSABLE = ")"  # adds a parse error after `name = ` wherever it lands


class ScriptedEngine(EngineClient):
    def __init__(self, control: Path) -> None:
        super().__init__()
        self.control = control
        self.info = {"backend": "native", "granularity": "step", "edits": True}

    async def start(self, progress: Progress) -> None:
        self.set_state("ready")

    def submit(self, request: CompletionRequest) -> EngineJob:
        job = self.new_job(request, EngineJob)  # its deadlines; a newer request's arrival cancels it
        threading.Thread(target=self._complete, args=(job,), daemon=True).start()
        return job

    def _complete(self, job: EngineJob) -> None:
        req = job.completion
        rid = req.request_id
        if (self.control / "answer-unparsable").exists():
            job.push(EngineEvent("done", rid, UNPARSABLE, step=1, reason="end_of_middle", draft_complete=True,
                                 stats={"forwards": 1, "tokens": 1, "tpf": 1.0}))
            return
        prev = ""
        for k, text in enumerate(STEPS):
            if k > 0 and not self._await_go(k, job):
                job.push(EngineEvent("done", rid, prev, step=k, reason="superseded"))
                return
            job.push(EngineEvent("draft" if k == 0 else "edit", rid, text, step=k + 1, draft_complete=True))
            (self.control / f"pushed-{k}").write_text(f"{time.time() * 1000:.3f}")
            prev = text
        others = OTHERS if (req.plan.alternatives or 1) > 1 else ()
        job.push(EngineEvent("done", rid, prev, step=len(STEPS), reason="end_of_middle", alternatives=others,
                             stats={"forwards": len(STEPS), "tokens": 5, "tpf": 5 / len(STEPS)}))

    def _await_go(self, k: int, job: EngineJob) -> bool:
        """Wait for the test's go-k (a file, checked every 2 ms) unless the job is cancelled."""
        go = self.control / f"go-{k}"
        while not go.exists():
            if job.cancel_event.wait(0.002):
                return False
        return True

    async def close(self) -> None:
        return None


def factory(location: str, **_: object) -> ScriptedEngine:
    return ScriptedEngine(Path(os.environ["LLADA_SCRIPT_DIR"]))


def timed_notify(ls: server.LladaServer, method: str, params: dict[str, Any]) -> None:
    """The server's notify, noting when each scripted refinement left for the editor."""
    ls.protocol.notify(method, params)
    if method == "llada/refine" and not params.get("final") and 1 <= params.get("step", 0) - 1 < len(STEPS):
        (Path(os.environ["LLADA_SCRIPT_DIR"]) / f"sent-{params['step'] - 1}").write_text(f"{time.time() * 1000:.3f}")
    if method == "llada/refine" and params.get("final") and not params.get("reason") and params.get("step", 0) >= len(STEPS):
        (Path(os.environ["LLADA_SCRIPT_DIR"]) / "sent-final").write_text(f"{time.time() * 1000:.3f}")


_suggest = NextEditService.suggest


async def scripted_suggest(self: NextEditService, p: NextEditParams) -> Answer:
    """The real answer, replaced by next-edit.json's suggestions when its kind and detail match."""
    answer = await _suggest(self, p)
    script = Path(os.environ["LLADA_SCRIPT_DIR"]) / "next-edit.json"
    if script.exists():
        want = json.loads(script.read_text())
        if (answer.kind, answer.detail) == (want["kind"], want["detail"]):
            return Answer(answer.version, want["suggestions"], "", answer.kind, answer.detail)
    return answer


if __name__ == "__main__":
    server.LladaServer.notify = timed_notify  # type: ignore[method-assign,assignment]
    NextEditService.suggest = scripted_suggest  # type: ignore[method-assign]
    server.server.engine_factory = factory
    raise SystemExit(cli.main(sys.argv[1:]))
