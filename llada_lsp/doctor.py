"""`llada-lsp doctor`: check the configured backend and print a readable report.

For `--engine sglang`: the tokenizer is found offline (a directory or the local Hugging
Face cache), each server answers its readiness route (`/ready`, a router's `/readiness`) and `/model_info` (a router: its `/workers`,
and each worker's model), the model's family matches (LLaDA2.x, the tokenizer's), its
`/server_info` says which diffusion algorithm it runs, and one tiny completion makes the round trip (its latency is printed). For the other engines:
the model resolves. Exit status 0 when every check passed, 1 otherwise.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from llada_lsp.engines import http_client as http
from llada_lsp.engines import sglang_models
from llada_lsp.engines.sglang_servers import (
    ModelMismatch,
    Server,
    ServerPool,
    SglangConfig,
    check_family,
    local_description,
)
from llada_lsp.options import Options

Print = Callable[[str], None]
PROBE = "def add(a, b):\n    return "  # the round trip's prompt


class Report:
    def __init__(self, out: Print) -> None:
        self.out, self.failed = out, 0

    def ok(self, what: str) -> None:
        self.out(f"  ok    {what}")

    def fail(self, what: str) -> None:
        self.failed += 1
        self.out(f"  FAIL  {what}")


async def check_sglang(opts: Options, report: Report) -> None:
    from engine.model.model_path import resolve
    from engine.prompt.builder import PromptBuilder

    cfg = SglangConfig(urls=dict(opts.sglang.urls), router=opts.sglang.router, model=opts.model,
                       max_prompt_tokens=opts.max_prompt_tokens or 2048, default_preset=opts.mode,
                       start_timeout_s=0.0)
    report.out(f"backend sglang: presets {', '.join(cfg.presets()) or 'none'}")
    try:
        model_dir = await asyncio.to_thread(resolve, opts.model)
        builder = await asyncio.to_thread(PromptBuilder.from_dir, model_dir, cfg.max_prompt_tokens)
    except Exception as e:  # noqa: BLE001 - any tokenizer failure is the check's answer
        report.fail(f"tokenizer ({opts.model or 'the default model'}): {e}")
        return
    family, what = local_description(model_dir)
    (report.ok if family == "llada2" else report.fail)(
        f"tokenizer {what}, family {family if family == 'llada2' else 'not LLaDA2.x (what SGLang serves for this client)'}")
    pool = ServerPool(cfg, family, what, lambda: None)
    if not pool.servers:
        report.fail("no server configured (--sglang-url PRESET=URL or --sglang-router URL)")
        return
    layout = builder.layout(PROBE, "", heal=False, doc_key="doctor.py")
    body = {"input_ids": layout.ids, "stream": False,
            "sampling_params": {"max_new_tokens": 8, "temperature": 0, "stop_token_ids": sorted(builder.end_ids)}}
    for s in pool.servers:
        await check_server(pool, s, family, what, body, report)


async def check_server(pool: ServerPool, s: Server, family: str | None, what: str, body: dict[str, Any],
                       report: Report) -> None:
    kind = "router" if s.router else "server"
    report.out(f"{kind} {s.url} (presets {', '.join(s.presets)})")
    kw = {"connect_timeout": pool.cfg.connect_timeout_s, "read_timeout": pool.cfg.probe_timeout_s}
    try:
        status = await pool.health(s)
    except http.HttpError as e:
        report.fail(f"readiness: {e}")
        return
    if status != 200:
        report.fail(f"{s.probe_path}: HTTP {status}{' (still loading its model)' if status == 503 else ''}")
        return
    report.ok(f"{s.probe_path}: 200")
    targets = [s.url]
    if s.router:
        try:
            listed = await http.get_json(s.url, "/workers", **kw)
            targets = [str(w["url"]).rstrip("/") for w in (listed or {}).get("workers", []) if isinstance(w, dict)]
        except http.HttpError as e:
            report.fail(f"/workers: {e} (aborts cannot reach the workers)")
            return
        (report.ok if targets else report.fail)(f"/workers: {', '.join(targets) or 'none'} (aborts go there)")
    for url in targets:
        try:
            info = await pool.model_info(url)
            report.ok(f"{url}/model_info: {check_family(url, info, family, what)}")
            algo = (await pool.server_info(url)).get("dllm_algorithm")
            report.out(f"{url}/server_info: --dllm-algorithm {algo or 'unknown'}"
                       f"{' (in/del decoding)' if algo == sglang_models.INDEL_ALGORITHM else ''}")
        except (http.HttpError, ModelMismatch) as e:
            report.fail(f"{url}/model_info: {e}")
    t0 = time.perf_counter()
    try:
        out = await http.post_json(s.url, "/generate", body, connect_timeout=pool.cfg.connect_timeout_s,
                                   read_timeout=60.0)
    except http.HttpError as e:
        report.fail(f"/generate round trip: {e}")
        return
    ms = (time.perf_counter() - t0) * 1000
    meta = (out or {}).get("meta_info") or {}
    report.ok(f"/generate round trip: {ms:.0f} ms, {meta.get('completion_tokens', '?')} tokens, "
              f"text {str((out or {}).get('text', ''))[:40]!r}")


async def check_model(opts: Options, report: Report) -> None:
    from engine.model.model_path import ModelNotFoundError, resolve

    report.out(f"backend {opts.engine}")
    try:
        d: Path = await asyncio.to_thread(resolve, opts.model)
    except ModelNotFoundError as e:
        report.fail(f"model: {e}")
        return
    report.ok(f"model {d}")
    report.out("  (only --engine sglang is checked further)")


def run(opts: Options, out: Print = print) -> int:
    report = Report(out)
    check = check_sglang if opts.engine == "sglang" else check_model
    asyncio.run(check(opts, report))
    out("all checks passed" if not report.failed else f"{report.failed} check(s) failed")
    return 0 if not report.failed else 1
