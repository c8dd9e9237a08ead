"""FAKE sglang-router (0.3.2) for tests and benches: round-robin `/generate` over workers.

What was verified in the wheel `sglang_router-0.3.2` (its HTTP server is Rust, compiled into
`sglang_router/sglang_router_rs.abi3.so`; the Python files only launch it, and
`sglang_router/mini_lb.py` is the PD-disaggregation load balancer, not this router):
- The route table strings in the binary (from `src/server.rs`) list `/generate`,
  `/v1/chat/completions`, `/v1/completions`, ..., `/liveness`, `/readiness`, `/health`,
  `/health_generate`, `/engine_metrics`, `/get_model_info`, `/get_server_info`,
  `/flush_cache`, `/get_loads`, `/workers`, `/workers/{worker_id}` and `/ha/...`; there is
  NO `/abort_request` route, so an abort sent to the router never reaches a worker
  (axum answers an unknown route 404 with an empty body).
- `GET /workers` is served by `list_workers_rest`: `{"workers": [{"id", "url", "model_id",
  "priority", "cost", "worker_type": "regular", "is_healthy", "load", "connection_mode",
  "metadata"}, ...], ...}`, as the real 0.3.2 router answered it in front of this fake
  (tests/llada_lsp/engines/test_real_router.py runs it); this fake returns the keys the client reads.
- Seen from the real router too: `/readiness` answers `{"status": "ready", "healthy_workers",
  "total_workers"}` (200), `/health` and `/liveness` a plain `OK`, `/model_info` 404 (it
  forwards only the deprecated `/get_model_info`), `/abort_request` 404 with an empty body.
Not modelled: cache-aware routing (the default policy of the real router; this fake is plain
round-robin), health checking, retries, circuit breakers, worker registration endpoints.
"""

from __future__ import annotations

from typing import Any

from tests.fakes.http_server import HttpRequest, HttpServer, Responder
from tests.fakes.http_server import request as http_request


class FakeRouter:
    """Forwards `/generate` round-robin; `forwarded` lists (worker url, path) per request and
    `refused` the paths it answered 404 (an `/abort_request` lands there)."""

    def __init__(self, workers: list[str], model_id: str = "default") -> None:
        self.workers = list(workers)
        self.model_id = model_id
        self.forwarded: list[tuple[str, str]] = []
        self.refused: list[str] = []
        self.port: int | None = None
        self._next = 0
        self._http = HttpServer(self._handle)

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        self.port = await self._http.start(host, port if port else (self.port or 0))
        return f"http://{host}:{self.port}"

    async def stop(self) -> None:
        await self._http.stop()

    def list_workers(self) -> dict[str, Any]:
        infos = [
            {"url": w, "model_id": self.model_id, "worker_type": "regular", "is_healthy": True, "load": 0}
            for w in self.workers
        ]
        return {"workers": infos, "total": len(infos),
                "stats": {"prefill_count": 0, "decode_count": 0, "regular_count": len(infos)}}

    async def _handle(self, req: HttpRequest, resp: Responder) -> None:
        if req.method == "GET" and req.path == "/workers":
            await resp.send_json(200, self.list_workers())
        elif req.method == "GET" and req.path == "/readiness":
            n = len(self.workers)
            if n:
                await resp.send_json(200, {"status": "ready", "healthy_workers": n, "total_workers": n})
            else:  # the real body for this case was not observed
                await resp.send(503)
        elif req.method == "GET" and req.path in ("/health", "/liveness"):
            await resp.send(200 if self.workers else 503, b"OK" if self.workers else b"", "text/plain; charset=utf-8")
        elif req.method == "POST" and req.path == "/generate" and self.workers:
            worker = self.workers[self._next % len(self.workers)]
            self._next += 1
            self.forwarded.append((worker, req.path))
            await self._forward(worker, req, resp)
        else:
            self.refused.append(req.path)
            await resp.send(404)

    async def _forward(self, worker: str, req: HttpRequest, resp: Responder) -> None:
        up = await http_request(worker, req.method, req.path, req.json())
        try:
            if up.headers.get("transfer-encoding", "").lower() == "chunked":
                await resp.start_stream(up.status)
                async for data in up.chunks():
                    await resp.chunk(data)
                await resp.end_stream()
            else:
                ctype = up.headers.get("content-type", "application/json")
                await resp.send(up.status, await up.body(), ctype)
        finally:
            up.close()
