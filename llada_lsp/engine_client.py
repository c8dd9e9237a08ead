"""The engine clients: the in-process one here, the daemon's in `llada_lsp.ws_engine`, and
`make_engine`, which picks one from the `engine` option. Their interface (`EngineClient`,
`EngineJob`) is `llada_lsp.engine_base`, re-exported here.

The in-process client runs the engine in one worker thread (`TextEngine` is not thread-safe)
and imports torch lazily, in that thread: the only way from `llada_lsp` to torch.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from engine.api import CompletionRequest, EngineEvent
from llada_lsp.engine_base import (
    TIMED_OUT,
    EngineClient,
    EngineJob,
    EngineUnavailable,
    Progress,
    StateListener,
)

__all__ = ["TIMED_OUT", "EngineClient", "EngineJob", "EngineUnavailable", "InProcessEngine",
           "Progress", "StateListener", "make_engine"]

log = logging.getLogger(__name__)


class InProcessEngine(EngineClient):
    """engine.service.TextEngine in a worker thread of this process."""

    def __init__(self, model_dir: str | None = None, mode: str = "speedy",
                 device: str = "cpu", factory: Callable[..., Any] | None = None,
                 max_prompt_tokens: int | None = None, prompt_template: str | None = None) -> None:
        super().__init__()
        self.model_dir, self.mode, self.device = model_dir, mode, device
        # the model's own prompt budget and format unless the options name others
        self.prompt_kwargs: dict[str, Any] = {k: v for k, v in (("max_prompt_tokens", max_prompt_tokens),
                                                                ("prompt_template", prompt_template)) if v}
        self._factory = factory
        self._engine: Any = None
        self._jobs: queue.Queue[tuple[str, EngineJob, Any] | None] = queue.Queue()
        self._latest: dict[str, EngineJob] = {}
        self._running: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    async def start(self, progress: Progress) -> None:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()

        def report(msg: str, pct: int) -> None:
            loop.call_soon_threadsafe(progress, msg, pct)

        def resolve() -> None:
            if not done.done():
                done.set_result(None)

        def finish() -> None:
            loop.call_soon_threadsafe(resolve)

        self.state = "loading"
        self._thread = threading.Thread(target=self._worker, args=(report, finish),
                                        name="llada-engine", daemon=True)
        self._thread.start()
        await done

    def _load(self, report: Progress) -> None:
        report("importing the engine", 5)
        factory = self._factory
        if factory is None:
            from engine.service import TextEngine  # lazy: imports torch

            factory = TextEngine
        report("loading the model", 40)
        kwargs: dict[str, Any] = {"mode": self.mode, "device": self._device(), **self.prompt_kwargs}
        self._engine = factory(self.model_dir, **kwargs)
        info = getattr(self._engine, "info", None)
        self.info = dict(info()) if callable(info) else {}
        report("model ready", 100)

    def _device(self) -> str:
        if self.device != "auto":
            return self.device
        import torch  # lazy, in the worker thread

        return "cuda" if torch.cuda.is_available() else "cpu"

    def _worker(self, report: Progress, finish: Callable[[], None]) -> None:
        try:
            self._load(report)
            self.state = "ready"
        except Exception as e:  # noqa: BLE001 - any load failure becomes a reported state
            log.exception("engine failed to load")
            self.error = f"{type(e).__name__}: {e}"
            self.state = "error"
        finally:
            finish()
        if self.state != "ready":
            return
        while not self._stop.is_set():
            item = self._jobs.get()
            if item is None:
                break
            self._run(*item)

    def submit(self, request: CompletionRequest) -> EngineJob:
        return self._enqueue("complete", request, None)

    def remask(self, job: EngineJob, spans: list[tuple[int, int]]) -> EngineJob | None:
        if self._engine is None or not hasattr(self._engine, "remask"):
            return None
        return self._enqueue("remask", job.request, spans)

    def _enqueue(self, op: str, request: CompletionRequest, spans: Any) -> EngineJob:
        job = self.with_deadlines(EngineJob(request, asyncio.get_running_loop()))
        older = self._latest.get(request.doc_key)
        if older is not None and not older.finished:
            older.cancel("superseded")
        self._latest[request.doc_key] = job
        self.counters["submitted"] += 1
        if self.state != "ready":
            job.finished = True
            job.push(EngineEvent("error", request.request_id, "", error="engine not ready"))
            return job
        self._jobs.put((op, job, spans))
        return job

    def _run(self, op: str, job: EngineJob, spans: Any) -> None:
        rid = job.request.request_id
        if job.cancelled:
            self.counters["skipped"] += 1
            job.finished = True
            job.push(EngineEvent("done", rid, "", reason="superseded"
                                 if job.cancel_reason == "superseded" else "cancelled"))
            return
        key = job.doc_key
        self._running[key] = self._running.get(key, 0) + 1
        self.counters["max_running_per_doc"] = max(self.counters["max_running_per_doc"],
                                                   self._running[key])
        self.counters["engine_calls"] += 1
        job.started_at = time.perf_counter()
        job.ran = True
        try:
            if op == "remask":
                events = self._engine.remask(rid, spans, job.cancel_event)
            else:
                events = self._engine.complete(job.request, job.cancel_event)
            last_kind = None
            for ev in events:
                last_kind = ev.kind
                job.push(ev)
                if self._stop.is_set():
                    job.cancel("shutdown")
            if last_kind not in ("done", "error"):
                job.push(EngineEvent("done", rid, "", reason="error", error="no done event"))
            if job.cancelled:
                self.counters["cancelled"] += 1
        except Exception as e:  # noqa: BLE001 - reported to the request, the worker goes on
            log.exception("engine request %s failed", rid)
            job.push(EngineEvent("error", rid, "", error=f"{type(e).__name__}: {e}"))
        finally:
            self._running[key] -= 1
            job.finished = True

    def running(self) -> int:
        return sum(self._running.values())

    async def close(self) -> None:
        self._stop.set()
        for job in list(self._latest.values()):
            job.cancel("shutdown")
        self._jobs.put(None)
        if self._thread is not None and self._thread.is_alive():
            await asyncio.get_running_loop().run_in_executor(None, self._thread.join, 5.0)


def make_engine(location: str, *, model_dir: str | None, mode: str, device: str,
                token: str | None = None, max_prompt_tokens: int | None = None,
                prompt_template: str | None = None) -> EngineClient:
    """The engine client for the `engine` option.

    "inprocess": `TextEngine` in a worker thread of this process (torch loads there, lazily);
    "auto": the user's resident daemon (from the per-user runtime file), started detached
    when none runs, so that every editor on the machine shares one model;
    "ws://host:port" / "wss://...": that daemon; `token` (else $LLADA_ENGINE_TOKEN, else the
    runtime file's token when the URL is the user's own daemon) authenticates.
    """
    if location == "inprocess":
        return InProcessEngine(model_dir, mode=mode, device=device, max_prompt_tokens=max_prompt_tokens,
                               prompt_template=prompt_template)
    from llada_lsp.ws_engine import WsEngineClient  # lazy: websockets only when used

    if location == "auto":
        return WsEngineClient(None, token=token, model=model_dir, mode=mode, device=device)
    if location.startswith(("ws://", "wss://")):
        return WsEngineClient(location, token=token)
    raise ValueError(f"unknown engine location {location!r}: 'inprocess', 'auto' or a ws:// URL")
