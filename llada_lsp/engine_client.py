"""The engine clients: the in-process one here, the daemon's in `llada_lsp.ws_engine`, and
`make_engine`, which picks one from the `engine` option. Their interface (`EngineClient`,
`EngineJob`) is `llada_lsp.engine_base`, re-exported here.

The in-process client runs the engine's step loop in one worker thread (every torch op
there) and imports torch lazily, in that thread: the only way from `llada_lsp` to torch.
`submit(request)` returns an `EngineJob` whose `events()` async-iterates the engine's text
events; a newer job for the same `doc_key` supersedes the older one between forwards.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
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


@dataclass
class InProcessJob(EngineJob):
    """A job of the in-process engine: cancelling it tells the engine's step loop."""

    on_cancel: Callable[[str], None] | None = None

    def cancel(self, reason: str = "cancelled") -> None:
        first = not self.cancel_event.is_set()
        super().cancel(reason)
        if first and not self.finished and self.on_cancel is not None:
            self.on_cancel(self.request.request_id)


class InProcessEngine(EngineClient):
    """engine.service.TextEngine's step loop (`TextEngine.loop()`, the daemon's scheduler with
    one owner) run in a worker thread of this process: the thread loads the model and runs
    every torch op. Jobs enter the loop's inbox from any thread and leave through an emit
    callback; the loop applies supersession (same doc_key), cancels and deadlines between
    forwards, as for the daemon's connections."""

    OWNER = "\0inprocess"

    def __init__(self, model_dir: str | None = None, mode: str = "speedy",
                 device: str = "cpu", factory: Callable[..., Any] | None = None,
                 max_prompt_tokens: int | None = None, prompt_template: str | None = None,
                 dtype: str = "auto", prompt_format: str = "auto") -> None:
        super().__init__()
        self.model_dir, self.mode, self.device = model_dir, mode, device
        self.dtype = dtype  # "auto": the checkpoint's own (engine.model.loader.resolve_dtype)
        # the model's own prompt budget and format unless the options name others
        self.prompt_kwargs: dict[str, Any] = {k: v for k, v in (("max_prompt_tokens", max_prompt_tokens),
                                                                ("prompt_template", prompt_template)) if v}
        if prompt_format != "auto":
            self.prompt_kwargs["prompt_format"] = prompt_format
        self._factory = factory
        self._engine: Any = None
        self._loop: Any = None  # the engine's step loop (engine.decoding.scheduler.Scheduler)
        self._latest: dict[str, EngineJob] = {}
        self._running: dict[str, int] = {}
        self._counted: set[int] = set()  # ids of the jobs counted in _running
        self._lock = threading.Lock()
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
        # `mode` is the option's (user-facing) name of the engine's default preset
        kwargs: dict[str, Any] = {"preset": self.mode, "device": self._device(), **self.prompt_kwargs}
        if self.dtype != "auto":  # auto: the loader's default, a real checkpoint's own dtype
            from engine.model.loader import resolve_dtype

            kwargs["dtype"] = resolve_dtype(self.dtype, kwargs["device"])
        self._engine = factory(self.model_dir, **kwargs)
        self._loop = self._engine.loop()
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
        if self.state == "ready" and not self._stop.is_set():
            self._loop.run()  # until close(): schedule, forward, update; then cancels what runs

    def submit(self, request: CompletionRequest) -> EngineJob:
        return self._enqueue("complete", request, None)

    def remask(self, job: EngineJob, spans: list[tuple[int, int]]) -> EngineJob | None:
        if self._loop is None:
            return None
        return self._enqueue("remask", job.request, spans)

    def _enqueue(self, op: str, request: CompletionRequest, spans: Any) -> EngineJob:
        job = self.with_deadlines(InProcessJob(request, asyncio.get_running_loop(), on_cancel=self._cancel))
        older = self._latest.get(job.doc_key)
        if older is not None and not older.finished:
            older.cancel_reason = "superseded"  # the loop supersedes it by document key
            older.cancel_event.set()
            self._count(older, False)
        self._latest[job.doc_key] = job
        self.counters["submitted"] += 1
        if self.state != "ready" or self._stop.is_set():
            job.finished = True
            job.push(EngineEvent("error", request.request_id, "", error="engine not ready"))
            return job
        self._run(op, job, spans)
        return job

    def _run(self, op: str, job: EngineJob, spans: Any) -> None:
        """Hand `job` to the step loop; its events come back through `_emitter`."""
        self._count(job, True)
        self.counters["engine_calls"] += 1
        job.started_at = time.perf_counter()
        job.ran = True
        emit = self._emitter(job)
        deadline_ms = max(1, int(job.deadline_s * 1000)) if job.deadline_s else None
        if op == "remask":
            self._loop.remask(job.request.request_id, spans, self.OWNER, emit, deadline_ms)
        else:
            self._loop.submit(job.request, self.OWNER, emit, deadline_ms)

    def _emitter(self, job: EngineJob) -> Callable[[EngineEvent, Any], None]:
        def emit(ev: EngineEvent, _why: Any) -> None:  # noqa: ANN401 - engine.decoding.rejections.Rejection
            """On the worker thread, for each of the job's events."""
            if ev.kind in ("done", "error"):
                if ev.reason in ("cancelled", "superseded"):
                    self.counters["cancelled"] += 1
                self._count(job, False)
                job.finished = True
            job.push(ev)
        return emit

    def _cancel(self, request_id: str) -> None:
        if self._loop is not None:
            self._loop.cancel(request_id, self.OWNER)

    def _count(self, job: EngineJob, running: bool) -> None:
        """Count `job` among its document's running requests (once), or stop counting it."""
        key = job.doc_key
        with self._lock:
            if running and id(job) not in self._counted:
                self._counted.add(id(job))
                self._running[key] = self._running.get(key, 0) + 1
                self.counters["max_running_per_doc"] = max(self.counters["max_running_per_doc"],
                                                           self._running[key])
            elif not running and id(job) in self._counted:
                self._counted.discard(id(job))
                self._running[key] -= 1

    def running(self) -> int:
        return sum(self._running.values())

    async def close(self) -> None:
        self._stop.set()
        for job in list(self._latest.values()):
            job.cancel("shutdown")
        if self._loop is not None:
            self._loop.request_stop()
        if self._thread is not None and self._thread.is_alive():
            await asyncio.get_running_loop().run_in_executor(None, self._thread.join, 5.0)


def make_engine(location: str, *, model_dir: str | None, mode: str, device: str,
                token: str | None = None, max_prompt_tokens: int | None = None,
                prompt_template: str | None = None, sglang: Any = None, dtype: str = "auto",
                prompt_format: str = "auto") -> EngineClient:
    """The engine client for the `engine` option.

    "inprocess": `TextEngine` in a worker thread of this process (torch loads there, lazily);
    "auto": the user's resident daemon (from the per-user runtime file), started detached
    when none runs, so that every editor on the machine shares one model;
    "ws://host:port" / "wss://...": that daemon; `token` (else $LLADA_ENGINE_TOKEN, else the
    runtime file's token when the URL is the user's own daemon) authenticates;
    "sglang": SGLang servers (`sglang`: the options' `SglangOptions`, urls per preset and/or a
    router), prompts tokenized here with the tokenizer of `model_dir` (`llada_lsp.sglang_engine`).
    """
    if location == "sglang":
        from llada_lsp.sglang_engine import SglangEngineClient  # lazy: only when used
        from llada_lsp.sglang_servers import SglangConfig

        urls = dict(getattr(sglang, "urls", None) or {})
        return SglangEngineClient(SglangConfig(urls=urls, router=getattr(sglang, "router", None), model=model_dir,
                                               max_prompt_tokens=max_prompt_tokens or 2048, default_preset=mode))
    if location == "inprocess":
        return InProcessEngine(model_dir, mode=mode, device=device, max_prompt_tokens=max_prompt_tokens,
                               prompt_template=prompt_template, dtype=dtype, prompt_format=prompt_format)
    from llada_lsp.ws_engine import WsEngineClient  # lazy: websockets only when used

    if location == "auto":
        return WsEngineClient(None, token=token, model=model_dir, mode=mode, device=device)
    if location.startswith(("ws://", "wss://")):
        return WsEngineClient(location, token=token)
    raise ValueError(f"unknown engine location {location!r}: 'inprocess', 'auto', 'sglang' or a ws:// URL")
