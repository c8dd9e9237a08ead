"""The engine clients: the in-process one here, the daemon's in `llada_lsp.engines.ws_engine`, and
`make_engine`, which picks one from the `engine` option. Their interface (`EngineClient`,
`EngineJob`) is `llada_lsp.engines.engine_base`, re-exported here.

The in-process client runs the engine's step loop in one worker thread (every torch op
there) and imports torch lazily, in that thread: the only way from `llada_lsp` to torch.
`submit(request)` returns an `EngineJob` whose `events()` async-iterates the engine's text
events; a newer job for the same `doc_key` supersedes the older one (`EngineClient.supersede`:
it is cancelled in the loop between forwards).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from typing import Any

from engine.api import CompletionRequest, EngineEvent
from llada_lsp.engines.engine_base import (
    END_KINDS,
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
    """engine.service.TextEngine's step loop (`TextEngine.loop()`, the daemon's scheduler with
    one owner) run in a worker thread of this process: the thread loads the model and runs
    every torch op. Jobs enter the loop's inbox from any thread and leave through an emit
    callback; the loop applies cancels (a superseded job's too) and deadlines between
    forwards, as for the daemon's connections."""

    OWNER = "\0inprocess"

    def __init__(self, model_dir: str | None = None, device: str = "cpu", factory: Callable[..., Any] | None = None,
                 max_prompt_tokens: int | None = None, prompt_template: str | None = None,
                 dtype: str = "auto", prompt_format: str = "auto", threads: int = 0) -> None:
        super().__init__()
        self.model_dir, self.device = model_dir, device
        self.dtype = dtype  # "auto": the checkpoint's own (engine.model.loader.resolve_dtype)
        # the model's own prompt budget and format unless the options name others
        self.prompt_kwargs: dict[str, Any] = {k: v for k, v in (("max_prompt_tokens", max_prompt_tokens),
                                                                ("prompt_template", prompt_template)) if v}
        if prompt_format != "auto":
            self.prompt_kwargs["prompt_format"] = prompt_format
        if threads:  # else the engine sizes them for the machine (engine.model.threads)
            self.prompt_kwargs["threads"] = threads
        self._factory = factory
        self._engine: Any = None
        self._loop: Any = None  # the engine's step loop (engine.decoding.scheduler.Scheduler)
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
        # no preset: each request's plan names its own (the engine's default is for plans naming none)
        kwargs: dict[str, Any] = {"device": self._device(), **self.prompt_kwargs}
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
        job = self.new_job(request, EngineJob)  # an older job of the document: cancelled in the loop first
        if self.state != "ready" or self._stop.is_set():
            self.deliver(job, EngineEvent("error", request.request_id, "", error="engine not ready"))
            return job
        self.start_job(job)

        def emit(ev: EngineEvent, _why: Any) -> None:  # noqa: ANN401 - on the worker thread
            self.deliver(job, ev)

        deadline_ms = max(1, int(job.deadline_s * 1000)) if job.deadline_s else None
        if op == "remask":
            self._loop.remask(request.request_id, spans, self.OWNER, emit, deadline_ms)
        else:
            self._loop.submit(request, self.OWNER, emit, deadline_ms)
        return job

    def deliver(self, job: EngineJob, ev: EngineEvent) -> None:
        """The step loop has no other word of a job than its events: the last releases it."""
        super().deliver(job, ev)
        if ev.kind in END_KINDS:
            self.release(job)

    def send_cancel(self, job: EngineJob) -> None:
        if self._loop is not None:
            self._loop.cancel(job.request.request_id, self.OWNER)

    async def close(self) -> None:
        self._stop.set()
        self.cancel_all("shutdown")
        if self._loop is not None:
            self._loop.request_stop()
        if self._thread is not None and self._thread.is_alive():
            await asyncio.get_running_loop().run_in_executor(None, self._thread.join, 5.0)


def make_engine(location: str, *, model_dir: str | None, mode: str, device: str,
                token: str | None = None, max_prompt_tokens: int | None = None,
                prompt_template: str | None = None, sglang: Any = None, dtype: str = "auto",
                prompt_format: str = "auto", threads: int = 0) -> EngineClient:
    """The engine client for the `engine` option.

    "inprocess": `TextEngine` in a worker thread of this process (torch loads there, lazily);
    "auto": the user's resident daemon (from the per-user runtime file), started detached
    when none runs, so that every editor on the machine shares one model;
    "ws://host:port" / "wss://...": that daemon; `token` (else $LLADA_ENGINE_TOKEN, else the
    runtime file's token when the URL is the user's own daemon) authenticates;
    "sglang": SGLang servers (`sglang`: the options' `SglangOptions`, urls per preset and/or a
    router), prompts tokenized here with the tokenizer of `model_dir` (`llada_lsp.engines.sglang_engine`).
    `threads`: torch threads, fixed (0: sized for the machine and re-checked): the in-process
    engine's, or those of a daemon that "auto" starts (a daemon already running keeps its own).
    The preset travels with each request (`Plan.preset`, the `mode` option then); `mode` here
    only routes SGLang requests whose preset no server serves (`SglangConfig.default_preset`).
    """
    if location == "sglang":
        from llada_lsp.engines.sglang_engine import SglangEngineClient  # lazy: only when used
        from llada_lsp.engines.sglang_servers import SglangConfig

        urls = dict(getattr(sglang, "urls", None) or {})
        return SglangEngineClient(SglangConfig(urls=urls, router=getattr(sglang, "router", None), model=model_dir,
                                               max_prompt_tokens=max_prompt_tokens or 2048, default_preset=mode))
    if location == "inprocess":
        return InProcessEngine(model_dir, device=device, max_prompt_tokens=max_prompt_tokens,
                               prompt_template=prompt_template, dtype=dtype, prompt_format=prompt_format,
                               threads=threads)
    from llada_lsp.engines.ws_engine import WsEngineClient  # lazy: websockets only when used

    if location == "auto":
        return WsEngineClient(None, token=token, model=model_dir, device=device, threads=threads)
    if location.startswith(("ws://", "wss://")):
        return WsEngineClient(location, token=token)
    raise ValueError(f"unknown engine location {location!r}: 'inprocess', 'auto', 'sglang' or a ws:// URL")
