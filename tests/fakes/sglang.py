"""FAKE SGLang server for tests and benches: a loopback stand-in for `sglang.launch_server`
serving a diffusion LM (`--dllm-algorithm`), following sglang 0.5.23 point by point.

No model runs here: replies are scripted token ids, one block per `block_delay_ms` round.
It is what the SGLang engine client's tests and the bench talk to where no GPU is.

    python -m tests.fakes.sglang_cli --port 0 --block-delay-ms 40 --reply-file F \
        --model-path inclusionAI/LLaDA2.0-mini --tokenizer engine/checkpoints/mini-code

prints `{"port": N, "url": ...}` on stdout once it listens. The scheduler (rows, rounds,
aborts) is `tests.fakes.sglang_scheduler`; this module is its HTTP side.

Followed (files of the 0.5.23 wheel, `sglang/...`; the row rules are in `sglang_rows`,
the request checks in `sglang_contract`):
- Start-up: with `load_s` the port is bound but not listening, so connections are refused
  while the model loads (`srt/entrypoints/http_server.py:launch_server` starts uvicorn only
  after the scheduler processes are up); then `start_delay_s` of warm-up during which the
  server is `ServerStatus.Starting` (503), then ready.
- `GET /ready`: 200 or 503 from the server's state, at once (`http_server.py:ready`,
  `TokenizerManager.is_ready`).
- `GET /health`, `/health_generate`: 503 while starting; else a 1-token generation (rid
  `HEALTH_CHECK_...`, `input_ids` [0]) is queued like any request and takes a running slot
  when its turn comes; the answer is 200 at the first 1 s tick (`asyncio.sleep(1)`) after
  which any output was received (`last_receive_tstamp > tic`), 503 after 20 s
  (`HEALTH_CHECK_TIMEOUT`) (`http_server.py:health_generate`).
- `GET /model_info` (and the deprecated `/get_model_info`): the keys of
  `http_server.py:model_info`; `GET /server_info` (`/get_server_info`): the resolved server
  args (`srt/utils/common.py:build_server_info`, e.g. `dllm_algorithm`,
  `json_model_override_args`, `dllm_fdfo`, `max_running_requests`, `page_size`) plus
  `startup_time`, `internal_states`, `version` (test_sglang_models checks the keys against
  the wheel). `--dllm-algorithm JointThresholdInDel` on a checkpoint without the edit ids
  fails at start (`startup_error`).
- `POST /generate`: contract check first (400 `{"error": "<text>"}`), then the request
  checks; SSE `data: {json}\\n\\n` events ending `data: [DONE]\\n\\n`, sent chunked as uvicorn
  sends a `StreamingResponse` (`http_server.py:serve_generate_request`).
- Max running requests: a dLLM runs `--max-running-requests` rows, 1 when unset
  (`srt/dllm/config.py:DllmConfig.from_server_args`); the rest wait in the queue and enter as
  rows finish (`srt/dllm/mixin/scheduler.py:_fetch_waiting_reqs`).
- A request is registered on arrival (`TokenizerManager.generate_request` ->
  `_init_req_state`) and reaches the scheduler `dispatch_delay_s` later (`await
  _tokenize_one_request`, then `_send_one_request`); a stream's head is sent first (Starlette
  starts a `StreamingResponse` before its generator runs).
- `POST /abort_request {"rid", "abort_all"}` answers 200 with an empty body
  (`http_server.py:abort_request`). The tokenizer manager forwards ONE abort per rid
  (`srt/managers/tokenizer_manager.py:TokenizerManager.abort_request`, `state.abort_sent`;
  `AbortRecord.dropped` says why one was not forwarded): with one tokenizer worker an
  unknown rid, a bare prefix included, is dropped, and an empty rid without `abort_all` is
  ignored. The scheduler then matches by PREFIX (`srt/managers/scheduler.py:
  Scheduler.abort_request`, `req.rid.startswith(recv_req.rid)`) over the rows it holds: an
  abort forwarded between registration and dispatch matches nothing, and that request then
  runs to its budget. A queued row ends at once with `{"type": "abort", "message": "Abort in
  waiting queue"}` (`TokenizerManager._handle_abort_req`); a running dLLM row sits in the dLLM
  manager between rounds and ends at once too, with what it has committed, as
  `FINISH_ABORT().to_json()` (`dllm_manager.pop_aborted_reqs`, `send_abort_output`).
- Prefill: one prompt block per round, `prefill_delay_ms` each (one forward), and decoding rows
  wait meanwhile (`srt/dllm/mixin/scheduler.py:_process_dllm_batches`; see sglang_rows).
- HTTP/1.1 keep-alive as uvicorn serves it (the router reuses its worker connections): a
  client's going away is noticed without a second reader on the connection
  (`tests.fakes.http_server.Watch`).
- Client disconnect: a stream's background task aborts the rid 2 s after the response ends
  (`TokenizerManager.create_abort_task`, `asyncio.sleep(2)`); a non-streaming request notices
  on its 4 s wait timeout (`_stream_one_response`, `SGLANG_REQUEST_STATE_WAIT_TIMEOUT`).
Not modelled: batches of prompts, `n > 1`, logprobs, sessions, LoRA, the radix cache,
OpenAI routes, API keys, FastAPI's 422 detail lists (a body that is not JSON gets a plain 422).
"""


from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from tests.fakes.http_server import HttpRequest, HttpServer, Responder, Watch
from tests.fakes.sglang_contract import contract_error, request_error, sampling_params
from tests.fakes.sglang_router import FakeRouter
from tests.fakes.sglang_rows import Row, Timing
from tests.fakes.sglang_scheduler import AbortRecord, Codec, Generator, SglangScheduler

__all__ = ["VERSION", "AbortRecord", "Codec", "FakeRouter", "FakeSglang", "Generator"]

VERSION = "0.5.23"


class FakeSglang(SglangScheduler):
    """In-process fake server: the scheduler (`SglangScheduler`) behind SGLang's HTTP routes.
    Counters for tests: `requests_received`, `received_rids`, `bodies`, and the scheduler's
    (`aborted_rids`, `abort_log`, `running_peak`, `rounds`, `timings[rid]`, `wait_for`)."""

    def __init__(
        self,
        *,
        model_path: str = "inclusionAI/LLaDA2.0-mini",
        architectures: Sequence[str] = ("LLaDA2MoeModelLM",),
        dllm_algorithm: str = "LowConfidence",
        model_config: dict[str, Any] | None = None,
        json_model_override_args: str = "{}",
        ready: bool = True,
        start_delay_s: float = 0.0,
        disconnect_abort_s: float = 2.0,
        nonstream_disconnect_s: float = 4.0,
        load_s: float = 0.0,
        dispatch_delay_s: float = 0.001,
        health_poll_s: float = 1.0,
        health_timeout_s: float = 20.0,
        **scheduling: Any,
    ) -> None:
        """The HTTP side's settings; `scheduling`: `SglangScheduler`'s (the reply, the
        tokenizer, block size and delays, `max_running_requests`, FDFO, ...)."""
        super().__init__(**scheduling)
        self.model_path, self.architectures = model_path, list(architectures)
        self.dllm_algorithm, self.json_model_override_args = dllm_algorithm, json_model_override_args
        startup_error(dllm_algorithm, {**(model_config or {}), **json.loads(json_model_override_args)})
        self.ready, self.start_delay_s = ready, start_delay_s
        self._ready_when_up = ready  # False: stays 503 until a test sets `ready`
        self.disconnect_abort_s, self.nonstream_disconnect_s = disconnect_abort_s, nonstream_disconnect_s
        self.load_s, self.dispatch_delay_s = load_s, dispatch_delay_s
        self.health_poll_s, self.health_timeout_s = health_poll_s, health_timeout_s
        self.health_rows = 0  # generations queued by /health
        self.listening = False
        self._loaded = asyncio.Event()
        self.requests_received = 0
        self.received_rids: list[str] = []
        self.bodies: list[tuple[str, Any]] = []  # (path, parsed JSON body) of every POST, as received
        self.port: int | None = None
        self._http = HttpServer(self._handle)
        self.startup_time = time.time()

    # ---- lifecycle ----

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Returns the URL at once. With `load_s`, the port is bound but refuses connections
        for that long (SGLang loads the model before uvicorn listens: `launch_server`); then
        `start_delay_s` of 503 (warm-up, `ServerStatus.Starting`), then ready."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port if port else (self.port or 0)))
        self.port = int(sock.getsockname()[1])
        self._loop_task = asyncio.create_task(self._rounds())
        if self.start_delay_s > 0 or self.load_s > 0:
            self.ready = False
        if self.load_s > 0:
            task = asyncio.create_task(self._listen_later(sock))
            self._bg.add(task)
            task.add_done_callback(self._bg.discard)
        else:
            await self._listen(sock)
        return f"http://{host}:{self.port}"

    async def _listen_later(self, sock: socket.socket) -> None:
        with contextlib.suppress(TimeoutError):  # the model loads (or a test ends the load)
            await asyncio.wait_for(self._loaded.wait(), self.load_s)
        await self._listen(sock)

    def finish_loading(self) -> None:
        """Ends the `load_s` phase now: the server listens."""
        self._loaded.set()

    async def _listen(self, sock: socket.socket) -> None:
        await self._http.start_on(sock)
        self.listening = True
        if self.start_delay_s > 0:
            asyncio.get_running_loop().call_later(self.start_delay_s, self._set_ready)
        else:
            self.ready = self._ready_when_up
        await self._notify()

    def _set_ready(self) -> None:
        self.ready = self._ready_when_up
        task = asyncio.create_task(self._notify())
        self._bg.add(task)
        task.add_done_callback(self._bg.discard)

    async def stop(self) -> None:
        """Like a killed server: connections drop, rows vanish; `start` again to restart."""
        await self._http.stop()
        self.listening = False
        for t in [self._loop_task, *self._bg]:
            if t is not None:
                t.cancel()
        await asyncio.gather(*[t for t in [self._loop_task, *self._bg] if t], return_exceptions=True)
        self._loop_task, self._bg = None, set()
        self._waiting.clear()
        self._running.clear()
        self._live.clear()

    # ---- HTTP ----

    async def _handle(self, req: HttpRequest, resp: Responder) -> None:
        routes: dict[tuple[str, str], Callable[[HttpRequest, Responder], Any]] = {
            ("GET", "/ready"): self._ready,
            ("GET", "/health"): self._health,
            ("GET", "/health_generate"): self._health,
            ("GET", "/model_info"): self._model_info,
            ("GET", "/get_model_info"): self._model_info,
            ("GET", "/server_info"): self._server_info,
            ("GET", "/get_server_info"): self._server_info,
            ("POST", "/generate"): self._generate,
            ("PUT", "/generate"): self._generate,
            ("POST", "/abort_request"): self._abort_request,
        }
        if req.method == "POST":
            self.bodies.append((req.path, _json_or_none(req)))
        handler = routes.get((req.method, req.path))
        if handler is not None:
            await handler(req, resp)
        elif any(path == req.path for _, path in routes):
            await resp.send_json(405, {"detail": "Method Not Allowed"})
        else:
            await resp.send_json(404, {"detail": "Not Found"})

    async def _ready(self, req: HttpRequest, resp: Responder) -> None:
        """`http_server.py:ready`: the server's state, at once."""
        await resp.send(200 if self.ready else 503)

    async def _health(self, req: HttpRequest, resp: Responder) -> None:
        """`http_server.py:health_generate`: 503 while starting; else a 1-token generation
        (rid `HEALTH_CHECK_...`, input_ids [0]) is queued like any request (it takes a running
        slot when its turn comes), and the answer is 200 at the first `health_poll_s` tick
        (the real `asyncio.sleep(1)`) after which any output was received, 503 after
        `health_timeout_s` (HEALTH_CHECK_TIMEOUT, 20 s)."""
        if not self.ready:
            await resp.send(503)
            return
        tic = time.perf_counter()
        sp = sampling_params({"sampling_params": {"max_new_tokens": 1, "temperature": 0.0}})
        row = Row(f"HEALTH_CHECK_{uuid.uuid4().hex}", [0], self.codec.encode("x") or [0], sp, False, [],
                  Timing(tic))
        self.health_rows += 1
        self._live[row.rid] = row
        self._dispatch(row)
        while time.perf_counter() < tic + self.health_timeout_s:
            await asyncio.sleep(self.health_poll_s)
            if self.last_receive > tic:
                self._live.pop(row.rid, None)
                await resp.send(200)
                return
        self._live.pop(row.rid, None)
        await resp.send(503)

    def model_info(self) -> dict[str, Any]:
        return {
            "model_path": self.model_path, "served_model_name": self.model_path,
            "tokenizer_path": self.model_path, "is_generation": True,
            "preferred_sampling_params": None, "weight_version": "default", "load_format": "auto",
            "reasoning_parser": None, "tool_call_parser": None, "disaggregation_mode": "null",
            "has_image_understanding": False, "has_audio_understanding": False,
            "model_type": "llada2_moe", "architectures": self.architectures,
        }

    async def _model_info(self, req: HttpRequest, resp: Responder) -> None:
        await resp.send_json(200, self.model_info())

    async def _server_info(self, req: HttpRequest, resp: Responder) -> None:
        await resp.send_json(200, self.server_info())

    def server_info(self) -> dict[str, Any]:
        return {
            "model_path": self.model_path, "served_model_name": self.model_path,
            "dllm_algorithm": self.dllm_algorithm, "dllm_algorithm_config": None,
            "json_model_override_args": self.json_model_override_args,
            "dllm_fdfo": self.fdfo, "max_running_requests": self.max_running,
            "page_size": self.block_size, "stream_interval": 1,
            "incremental_streaming_output": self.incremental, "disable_overlap_schedule": True,
            "tokenizer_worker_num": self.tokenizer_worker_num, "weight_version": "default",
            "startup_time": self.startup_time, "internal_states": [{}],
            "version": VERSION, "frontend": "python",
        }

    async def _abort_request(self, req: HttpRequest, resp: Responder) -> None:
        body = _json_or_none(req) or {}
        self.abort(str(body.get("rid") or ""), bool(body.get("abort_all", False)))
        await self._notify()
        await resp.send(200)

    async def _generate(self, req: HttpRequest, resp: Responder) -> None:
        body = _json_or_none(req)
        if body is None:
            await resp.send_json(422, {"detail": "JSON decode error"})
            return
        err = contract_error(body)
        if err is not None:
            await resp.send_json(400, {"error": err})
            return
        self.requests_received += 1
        err = request_error(body, set(self._live))
        if err is not None:
            await self._reject(body, err, resp)
            return
        row = self._make_row(body)
        self.received_rids.append(row.rid)
        self.timings[row.rid] = row.timing
        if row.stream:
            await resp.start_stream()  # Starlette sends the head before the generator runs
        self._live[row.rid] = row  # `TokenizerManager._init_req_state`: an abort now finds the rid
        await self._notify()
        if self.dispatch_delay_s > 0:  # `_tokenize_one_request`, then `_send_one_request`
            await asyncio.sleep(self.dispatch_delay_s)
        self._dispatch(row)
        if row.stream:
            await self._stream(row, req, resp)
        else:
            await self._whole(row, req, resp)

    async def _reject(self, body: dict[str, Any], err: str, resp: Responder) -> None:
        if not body.get("stream"):
            await resp.send_json(400, {"error": {"message": err}})
            return
        await resp.start_stream()
        event = {"error": {"message": err, "type": "invalid_request_error", "code": 400, "retryable": False}}
        await resp.chunk(b"data: " + json.dumps(event).encode() + b"\n\n")
        await resp.chunk(b"data: [DONE]\n\n")
        await resp.end_stream()

    async def _next(self, row: Row, gone: asyncio.Task[bool]) -> dict[str, Any] | None:
        """The row's next chunk; ConnectionResetError when the client went away first."""
        get = asyncio.create_task(row.chunks.get())
        await asyncio.wait({get, gone}, return_when=asyncio.FIRST_COMPLETED)
        if get.done():
            return get.result()
        get.cancel()
        raise ConnectionResetError("client went away")

    async def _stream(self, row: Row, req: HttpRequest, resp: Responder) -> None:
        watch = Watch(req)
        gone = asyncio.create_task(watch.gone())
        try:
            while True:
                out = await self._next(row, gone)
                if out is None:
                    break
                now = time.perf_counter()
                row.timing.first_chunk = row.timing.first_chunk or now
                row.timing.last_chunk = now
                await resp.chunk(b"data: " + json.dumps(out).encode() + b"\n\n")
            await resp.chunk(b"data: [DONE]\n\n")
            await resp.end_stream()
        except ConnectionError:
            self._later_abort(row, self.disconnect_abort_s)
            raise
        finally:
            gone.cancel()
            await watch.close()

    async def _whole(self, row: Row, req: HttpRequest, resp: Responder) -> None:
        watch = Watch(req)
        gone = asyncio.create_task(watch.gone())
        final: dict[str, Any] | None = None
        try:
            while True:
                try:
                    out = await self._next(row, gone)
                except ConnectionError:
                    self._later_abort(row, self.nonstream_disconnect_s)
                    raise
                if out is None:
                    break
                final = out
            row.timing.first_chunk = row.timing.last_chunk = time.perf_counter()
            await resp.send_json(200, final)
        finally:
            gone.cancel()
            await watch.close()


def startup_error(algorithm: str, config: dict[str, Any]) -> None:
    """The start-up refusal of `srt/dllm/config.py:DllmConfig.from_server_args` that the fake
    models: JointThresholdInDel on a checkpoint (`config`: its config.json with the
    `--json-model-override-args` applied) that names no `delete_token_id` / `split_token_id`
    (RuntimeError, as the server fails to start). A fake without `model_config` is a checkpoint
    with both ids."""
    if algorithm == "JointThresholdInDel" and config and (
            config.get("delete_token_id") is None or config.get("split_token_id") is None):
        raise RuntimeError("JointThresholdInDel is not supported for checkpoint: the checkpoint must declare "
                           "both delete_token_id and split_token_id")


def _json_or_none(req: HttpRequest) -> Any:
    try:
        return req.json()
    except (ValueError, UnicodeDecodeError):
        return None
