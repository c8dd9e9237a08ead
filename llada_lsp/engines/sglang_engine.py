"""The SGLang backend: completions served by SGLang servers (docs/scale-out.md).

`SglangEngineClient` implements the language server's `EngineClient` over SGLang's HTTP
API (0.5.23): it builds each prompt locally with the checkpoint's tokenizer
(`engine.prompt.builder.PromptBuilder`, offline), POSTs `/generate` with `input_ids`, its own
request id and `stream: true`, and turns the block-granular stream (cumulative `output_ids`
per committed block, or deltas under `--incremental-streaming-output`; empty FDFO chunks are
skipped) into "draft" events and one "done". The plan's text stop rules are applied here on
the cumulative answer; once one fires the request is aborted. A newer request for the same
document supersedes the older one: its stream is closed and `/abort_request` sent to the
server that has it (to every worker behind an `sglang-router`). Request ids are fixed-width
(`llada-<session>-<serial:010d>`), so SGLang's abort-by-prefix never hits another request.

What the protocol lacks is advertised in `info` (`llada_lsp.engines.capabilities`): block
granularity, no edit events, no remask, one candidate, no next edits; token healing is off
(prompts are built with heal=False). Server choice and recovery: `llada_lsp.engines.sglang_servers`;
a request no server took is sent again (`MAX_TRIES`); messages name no worker (`ServerPool.redact`).
No torch here.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from engine.api import CompletionRequest, EngineEvent
from engine.decoding.stops import cut_text
from engine.prompt.builder import PromptBuilder
from llada_lsp.engines import http_client as http
from llada_lsp.engines import sglang_models
from llada_lsp.engines.engine_base import EngineClient, EngineJob, Progress
from llada_lsp.engines.sglang_chunks import Answer, BadChunk, finish_reason, parse_event
from llada_lsp.engines.sglang_servers import (
    ModelMismatch,
    NoServer,
    Server,
    ServerPool,
    SglangConfig,
    local_description,
)

log = logging.getLogger(__name__)

# sends of one request that no server took: it could not connect, or one of these statuses
# came before any chunk (a router whose worker died, a busy server); another server or the
# router again takes it
MAX_TRIES = 3
RETRY_STATUSES = frozenset({500, 502, 503, 504})
UNAVAILABLE = frozenset({502, 503, 504})  # these count towards marking the server lost (ServerPool.failed)
FIRST_CHUNK_WAIT_S = 1.0  # a cancelled stream waits this long for the chunk that proves the rid is known
BuilderFactory = Callable[[Path, int], PromptBuilder]


def _resolve_model(model: str | None) -> Path:
    from engine.model.model_path import resolve  # lazy: HF-cache lookup only when used

    return resolve(model)


@dataclass
class SglangJob(EngineJob):
    rid: str = ""  # the SGLang request id
    server: Server | None = None
    phase: str = "queued"  # queued | sending | streaming | ended
    seen_chunk: bool = False  # the server streamed for it: it knows the rid
    response: http.Response | None = None
    task: asyncio.Task[None] | None = None
    aborts: list[float] = field(default_factory=list)  # perf_counter of each abort sent


class SglangEngineClient(EngineClient):
    """EngineClient over SGLang servers (see the module docstring)."""

    def __init__(self, cfg: SglangConfig, builder_factory: BuilderFactory | None = None) -> None:
        super().__init__()
        self.cfg = cfg
        self.builder: PromptBuilder | None = None
        self.pool: ServerPool | None = None
        self._builder_factory = builder_factory or PromptBuilder.from_dir
        self._session = secrets.token_hex(4)
        self._serial = itertools.count(1)
        self._tasks: set[asyncio.Task[Any]] = set()
        self._closing = False
        self._config: dict[str, Any] = {}  # the local checkpoint's config.json (block routing)
        self.counters.update(aborts_sent=0, lost=0, http_errors=0, degraded=0, retries=0)
        self.info = self._capabilities()

    def _capabilities(self) -> dict[str, Any]:
        return {"backend": "sglang", "granularity": "block", "edits": False, "remask": False,
                "alternatives": 1, "next_edit": False, "names": False, "presets": self.cfg.presets(),
                "block_routing": False, "indel": False}  # LLaDA2.2: what the servers report (_pool_changed)

    # -- start and health ---------------------------------------------------------------------
    async def start(self, progress: Progress) -> None:
        self.state = "loading"
        progress("loading the tokenizer", 5)
        try:
            model_dir = await asyncio.to_thread(_resolve_model, self.cfg.model)
            self.builder = await asyncio.to_thread(self._builder_factory, model_dir, self.cfg.max_prompt_tokens)
        except Exception as e:  # noqa: BLE001 - any tokenizer failure becomes a reported state
            self.state, self.error = "error", f"cannot load the tokenizer for the SGLang backend: {e}"
            return
        family, what = local_description(model_dir)
        self._config = sglang_models.local_config(model_dir)
        self.info = {**self.info, "tokenizer": str(model_dir),
                     "max_context_tokens": self.builder.max_context_tokens}  # the prompt's share for context
        self.pool = ServerPool(self.cfg, family, what, self._pool_changed)
        if not self.pool.servers:
            self.state, self.error = "error", "no SGLang server configured (option sglang.urls or sglang.router)"
            return
        progress(f"checking {len(self.pool.servers)} SGLang server(s)", 20)
        try:
            await asyncio.gather(*(self.pool.wait_up(s, lambda m: progress(m, 30)) for s in self.pool.servers))
        except ModelMismatch as e:
            await self.pool.close()
            self.state, self.error = "error", self.pool.redact(str(e))
            return
        self._pool_changed()
        if self.ready:
            progress("SGLang ready", 100)

    def _pool_changed(self) -> None:
        """A server was lost or came back: the state follows (each change is heard once)."""
        if self.pool is None or self._closing:
            return
        self.info = {**self.info, "servers": self.pool.status(),
                     "model": ", ".join(sorted({s.served for s in self.pool.servers if s.served})),
                     **sglang_models.capabilities([i for s in self.pool.servers for i in s.infos], self._config)}
        down = self.pool.down_presets()
        if down:
            lost = [s for s in self.pool.servers if not s.healthy]
            self.counters["lost"] += 1
            why = "; ".join(f"{s.url}: {s.lost}" for s in lost)
            self.set_state("error", f"SGLang unavailable for preset(s) {', '.join(down)} ({why}); retrying")
        else:
            self.set_state("ready")

    def job_timed_out(self, job: EngineJob) -> None:
        """A request passed its deadline: a server that does not answer its readiness probe,
        and streams nothing meanwhile, is marked lost."""
        super().job_timed_out(job)
        server = getattr(job, "server", None)
        if self.pool is not None and server is not None and server.healthy:
            self._spawn(self.pool.check(server))

    def set_state(self, state: str, error: str | None = None, new_reason: bool = False) -> None:
        if error is not None and self.pool is not None:
            error = self.pool.redact(error)
        super().set_state(state, error, new_reason)

    def fail(self, job: EngineJob, error: str, text: str = "") -> None:
        super().fail(job, self.pool.redact(error) if self.pool is not None else error, text)

    # -- requests -------------------------------------------------------------------------------
    def submit(self, request: CompletionRequest) -> EngineJob:
        job = self.new_job(request, SglangJob, rid=f"llada-{self._session}-{next(self._serial):010d}")
        job.task = self._spawn(self._run(job))
        return job

    def _spawn(self, coro: Any) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def send_cancel(self, job: EngineJob) -> None:
        """On the loop. One abort per rid, sent only once the server surely holds the rid.
        SGLang 0.5.23 forwards one abort per rid (`TokenizerManager.abort_request`,
        `abort_sent`), and an abort that reaches its scheduler before the request does (the
        request is registered before it is tokenized and dispatched) matches nothing: that
        request would then run to max_new_tokens in a running slot. So a stream that has
        shown a chunk (the scheduler holds the rid) is aborted and closed at once; one that
        has not waits for its first chunk (then the same), at most FIRST_CHUNK_WAIT_S, after
        which the rid is long dispatched (queued behind others) and the abort finds it. The
        editor hears the request's end at once either way."""
        assert isinstance(job, SglangJob)
        if job.phase in ("queued", "ended"):
            return  # `_run` sees the cancel before it sends anything
        if job.seen_chunk:
            self._let_go(job)
        else:
            self.end_cancelled(job)
            job.loop.call_later(FIRST_CHUNK_WAIT_S, self._give_up, job)

    def _give_up(self, job: SglangJob) -> None:
        if job.phase != "ended":
            self._let_go(job)

    def _let_go(self, job: SglangJob) -> None:
        self._abort(job)
        if job.response is not None:
            job.response.close()
        if job.task is not None:
            job.task.cancel()

    def _abort(self, job: SglangJob) -> None:
        """The one abort of `job` (to every worker behind a router); later calls do nothing."""
        if job.server is None or job.aborts:
            return
        job.aborts.append(time.perf_counter())
        self.counters["aborts_sent"] += 1
        for url in job.server.abort_targets:
            self._spawn(self._post_abort(url, job.rid))

    async def _post_abort(self, url: str, rid: str) -> None:
        try:
            await http.post_json(url, "/abort_request", {"rid": rid}, connect_timeout=self.cfg.connect_timeout_s,
                                 read_timeout=self.cfg.probe_timeout_s)
        except http.HttpError as e:
            log.info("abort of %s at %s failed: %s", rid, url, e)

    async def _run(self, job: SglangJob) -> None:
        try:
            if job.cancelled:
                self.skip(job)
                return
            if self.builder is None or self.pool is None:
                self.fail(job, f"the SGLang backend is not ready: {self.error or self.state}")
                return
            sent = self._body(job)
            tried: list[Server] = []
            why = ""
            while len(tried) < MAX_TRIES:
                try:
                    server = self.pool.pick(job.completion.plan.preset, tried)
                except NoServer as e:  # a retry found no other server: why the last one failed
                    self.fail(job, why if tried and tried[-1].healthy else str(e))
                    return
                if tried:
                    self.counters["retries"] += 1
                server.outstanding += 1
                job.server = server
                try:
                    why = await self._send(job, server, sent, last=len(tried) + 1 == MAX_TRIES) or ""
                finally:
                    server.outstanding -= 1
                if not why:
                    return
                if job.cancelled:
                    self.end_cancelled(job)
                    return
                tried.append(server)
            self.fail(job, why)
        except asyncio.CancelledError:
            if not job.cancelled:
                raise
            self.end_cancelled(job)
        except Exception as e:  # noqa: BLE001 - an answer not foreseen ends its request at once, never at the deadline
            log.exception("SGLang request %s failed", job.rid)
            self.fail(job, f"the SGLang backend failed on this request: {e!r}"[:500])
        finally:
            job.phase = "ended"
            self.release(job)
            if job.response is not None:
                job.response.close()

    def _body(self, job: SglangJob) -> tuple[dict[str, Any], list[int], str]:
        assert self.builder is not None
        req, plan = job.request, job.completion.plan
        if (plan.alternatives or 1) > 1 or plan.first_token_prefix:
            self.counters["degraded"] += 1  # one candidate, no token healing
        layout = self.builder.layout(req.prefix, req.suffix, heal=False, doc_key=req.doc_key, context=req.context)
        tail = self.builder.tail_of(layout.ids, "")
        body = {"rid": job.rid, "input_ids": layout.ids, "stream": True,
                "sampling_params": {"max_new_tokens": plan.max_tokens, "temperature": 0,
                                    "stop_token_ids": sorted(self.builder.end_ids)}}
        return body, layout.ids, tail

    async def _send(self, job: SglangJob, server: Server, sent: tuple[dict[str, Any], list[int], str],
                    last: bool) -> str | None:
        """Send `job` (`sent`: its body, prompt and tail) to `server` and stream its answer.
        Returns why no server took it when it may be sent again (not when `last`), else None."""
        url = server.url
        body, prompt, tail = sent
        if not job.ran:
            self.start_job(job)
        job.phase = "sending"
        try:
            resp = await http.request(url, "POST", "/generate", body, connect_timeout=self.cfg.connect_timeout_s,
                                      read_timeout=self.cfg.stream_read_timeout_s, accept="text/event-stream")
        except http.HttpError as e:
            if e.unreachable and not job.cancelled and not last:
                if self.pool is not None:
                    self.pool.mark_lost(server, str(e))
                return f"lost the SGLang server at {url}: {e}"
            self._failed(job, server, e)
            return None
        job.response, job.phase = resp, "streaming"
        if resp.status != 200:
            raw = await resp.body()
            err = http.HttpError(f"HTTP {resp.status}", resp.status, raw, url)
            self.counters["http_errors"] += 1
            what = "is starting or overloaded" if resp.status == 503 else "refused the request"
            why = f"the SGLang server at {url} {what} (HTTP {resp.status}): {err.detail()}"
            if resp.status in UNAVAILABLE and self.pool is not None:
                self.pool.failed(server, f"{url}: HTTP {resp.status}")
            if resp.status in RETRY_STATUSES and not last:
                return why
            self.fail(job, why)
            return None
        try:
            await self._stream(job, resp, prompt, tail)
        except http.HttpError as e:
            self._failed(job, server, e)
        except BadChunk as e:
            if job.cancelled:
                self.end_cancelled(job)
                return None
            self.counters["http_errors"] += 1
            self.fail(job, f"the SGLang server at {url} sent a bad answer: {e}")
        return None

    def _failed(self, job: SglangJob, server: Server, e: http.HttpError) -> None:
        if job.cancelled:
            self.end_cancelled(job)
            return
        if e.cut:  # it answered, then stopped: counted, and lost only if its probe fails too
            if self.pool is not None:
                self.pool.failed(server, f"{server.url}: a stream cut short")
                self._spawn(self.pool.check(server))
            self.counters["http_errors"] += 1
            self.fail(job, f"the SGLang server at {server.url} cut its answer short (the connection "
                           "closed before the end of the stream); ask again")
            return
        if e.unreachable and self.pool is not None:
            self.pool.mark_lost(server, str(e))
        self.fail(job, f"lost the SGLang server at {server.url}: {e}")

    async def _stream(self, job: SglangJob, resp: http.Response, prompt: list[int], tail: str) -> None:
        """Chunks -> draft events and one done (or error)."""
        assert self.builder is not None
        b, rid, plan = self.builder, job.request.request_id, job.completion.plan
        loose = replace(plan, stop="none", max_lines=0)  # the stop rule is applied below, to know it fired
        got, text = Answer(), ""
        async for data in resp.sse():
            if data.strip() == "[DONE]":
                break
            c = parse_event(data)  # BadChunk: an error at once (`_send`)
            if c.error is not None:
                self.counters["http_errors"] += 1
                self.fail(job, f"the SGLang server refused the request: {c.error}", text)
                return
            job.seen_chunk = True
            if job.server is not None:
                job.server.last_data_at, job.server.failures = time.monotonic(), 0  # it serves
            if job.cancelled:  # the rid is known now: its one abort
                self._abort(job)
                self.end_cancelled(job, text)
                return
            if not got.add(c):
                continue  # an empty FDFO delta: nothing committed this round
            new, fired = cut_text(b.answer(got.ids, loose, "", tail), plan)
            self.deliver(job, EngineEvent("draft", rid, new, step=got.blocks, draft_complete=True))
            text = new
            if fired or c.finish is not None:
                if c.finish is None:
                    self._abort(job)  # the server would go on to the budget
                reason = finish_reason(c.finish, fired, got.ids, b.end_ids)
                stats = got.stats(len(prompt), job.submitted_at, job.started_at,
                                  job.server.url if job.server else None, job.rid)
                self.deliver(job, EngineEvent("done", rid, text, step=got.blocks, reason=reason,  # type: ignore[arg-type]
                                              stats=stats))
                return
        if job.cancelled:
            self.end_cancelled(job, text)
            return
        self.fail(job, "the SGLang server ended the stream before the answer was complete (no finish "
                       "reason); ask again", text)

    async def close(self) -> None:
        self._closing = True
        jobs = self.live()
        self.cancel_all("shutdown")  # aborts on the server
        for job in jobs:
            if isinstance(job, SglangJob) and job.task is not None:
                job.task.cancel()
        if self.pool is not None:
            await self.pool.close()
        if self._tasks:  # the aborts, briefly
            await asyncio.wait(list(self._tasks), timeout=1.0)
        for task in list(self._tasks):
            task.cancel()
