"""The SGLang servers of the SGLang backend: which serve which preset, whether each is up,
which model each serves, and which one takes the next request.

A preset (speedy, quality) is a server-wide setting of SGLang (`--dllm-algorithm-config`:
thresholds and block size), so each preset maps to its own servers. Of a preset's healthy
servers the one with the fewest outstanding requests takes the next. An `sglang-router` URL
stands for its workers: requests go through the router, aborts to every worker it lists
(the router has no `/abort_request` route). A server that cannot be reached is marked lost
and probed again with backoff (`llada_lsp.engines.reconnect.backoff`) until it answers; the owner
hears each change through `on_change`. A server that answers but fails requests (HTTP 502, 503,
504, a stream cut short) is marked lost only after `LOST_AFTER` such failures in a row (any
request it serves resets the count): one busy moment does not flap the state to lost and back.
Messages name only the configured URLs: a router's workers are internal (`redact`). No torch
here.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from engine.presets import DEFAULT_PRESET
from llada_lsp.engines import http_client as http
from llada_lsp.engines import reconnect, sglang_models
from llada_lsp.engines.engine_base import EngineUnavailable

log = logging.getLogger(__name__)

FAMILIES = ("llada2",)  # what SGLang serves that this client can prompt (sglang_models)
LOST_AFTER = 3  # failed requests in a row (502/503/504, a cut stream) before a server counts as lost
_URL = re.compile(r"https?://[^\s\"'<>()\[\],]+")


class ModelMismatch(EngineUnavailable):
    """A server serves a model this client cannot prompt (not LLaDA2.x: `sglang_models.refusal`),
    or of another family than the local tokenizer's."""


@dataclass
class SglangConfig:
    """The `sglang` option: `urls` per preset, and/or one `router` for the presets not listed."""

    urls: dict[str, list[str]] = field(default_factory=dict)
    router: str | None = None
    model: str | None = None  # the local tokenizer: a directory or a cached HF repo id
    max_prompt_tokens: int = 2048
    # routing, not decoding: its servers take a request whose preset no server serves (the
    # `mode` option; a router serves it when `urls` does not list it)
    default_preset: str = DEFAULT_PRESET
    start_timeout_s: float = 120.0  # waiting out HTTP 503 (the server is loading its model)
    connect_timeout_s: float = 2.0
    probe_timeout_s: float = 5.0
    stream_read_timeout_s: float = 60.0  # silence on a stream (the request's deadlines are shorter)
    retry_cap_s: float = 10.0

    def presets(self) -> list[str]:
        names = list(self.urls)
        if self.router and self.default_preset not in names:
            names.append(self.default_preset)
        return names


def family_of(*names: Any) -> str | None:
    """"llada2" (LLaDA2.0/2.1, `LLaDA2MoeModelLM`), "llada" (LLaDA 1.x) or None, from model
    paths, repo ids, architectures and model types. This project's own small checkpoints
    (`llada_lsp` model type) are not SGLang models: None."""
    text = " ".join(str(n) for n in names if n).lower()
    if "llada_lsp" in text or "lladalsp" in text:
        return None
    if re.search(r"llada[-_ ]?2", text):
        return "llada2"
    if "llada" in text:
        return "llada"
    return None


def local_description(model_dir: Path) -> tuple[str | None, str]:
    """The family of a local checkpoint directory (its config.json, else its path) and how to
    name it in messages."""
    cfg: dict[str, Any] = {}
    try:
        cfg = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        pass
    arch = cfg.get("architectures") or []
    fam = family_of(*arch, cfg.get("model_type"), cfg.get("_name_or_path")) or family_of(str(model_dir))
    what = f"{model_dir} ({', '.join(map(str, arch)) or cfg.get('model_type') or 'no architectures'})"
    return fam, what


def check_family(url: str, info: dict[str, Any], local_family: str | None, local_what: str) -> str:
    """The server's model as a message names it; ModelMismatch when it cannot be served here."""
    path = str(info.get("model_path") or info.get("served_model_name") or "?")[:200]
    arch = info.get("architectures") or []
    arch = [str(a)[:100] for a in arch[:8]] if isinstance(arch, list) else [str(arch)[:100]]
    served = f"{path} ({', '.join(map(str, arch)) or info.get('model_type') or 'no architectures'})"
    fam = family_of(path, *arch)  # what 0.5.23 reports (model_path, architectures)
    refused = sglang_models.refusal(fam, arch)
    if refused is not None or fam not in FAMILIES:
        raise ModelMismatch(f"the SGLang server at {url} serves {served}: {refused or 'not LLaDA2.x'}; the local tokenizer is "
                            f"{local_what}. Point the sglang URLs at a server launched with a LLaDA2.x model")
    if fam != local_family:
        raise ModelMismatch(f"the SGLang server at {url} serves {served}, but the local tokenizer is "
                            f"{local_what} (another family): set the `model` option to the server's "
                            "checkpoint (a directory or a cached Hugging Face repo id)")
    return served


@dataclass
class Server:
    url: str
    presets: list[str]
    router: bool = False
    healthy: bool = False
    lost: str | None = None  # why it is down, while it is
    outstanding: int = 0  # requests streaming from it now
    served: str = ""  # its model, as messages name it
    infos: list[dict[str, Any]] = field(default_factory=list)  # /server_info of it (a router: of each worker)
    workers: list[str] = field(default_factory=list)  # a router's, for aborts
    retry: asyncio.Task[None] | None = None
    probe_path: str = ""  # the readiness route it answers (set by the first probe)
    last_data_at: float = -math.inf  # time.monotonic() of the last stream chunk read from it
    failures: int = 0  # requests failed in a row (`ServerPool.failed`)

    @property
    def abort_targets(self) -> list[str]:
        return self.workers if self.router else [self.url]


class NoServer(EngineUnavailable):
    """No healthy server serves the preset a request asks for."""


class ServerPool:
    def __init__(self, cfg: SglangConfig, local_family: str | None, local_what: str,
                 on_change: Callable[[], None]) -> None:
        self.cfg, self.local_family, self.local_what = cfg, local_family, local_what
        self.on_change = on_change
        self.servers: list[Server] = []
        by_url: dict[str, Server] = {}
        for preset, urls in cfg.urls.items():
            for url in urls:
                s = by_url.setdefault(url.rstrip("/"), Server(url.rstrip("/"), []))
                s.presets.append(preset)
        if cfg.router:
            covered = [p for p in cfg.presets() if p not in cfg.urls]
            r = by_url.setdefault(cfg.router.rstrip("/"), Server(cfg.router.rstrip("/"), [], router=True))
            r.router = True
            r.presets.extend(covered)
        self.servers = list(by_url.values())
        self.closing = False

    # -- choice ---------------------------------------------------------------------------
    def of(self, preset: str) -> list[Server]:
        return [s for s in self.servers if preset in s.presets]

    def pick(self, preset: str | None, tried: list[Server] | None = None) -> Server:
        """The healthy server of `preset` (else the default preset) with the fewest outstanding
        requests, not one of `tried` (a router may be tried again: it has other workers);
        NoServer (saying why) when none is up."""
        name = preset if preset and self.of(preset) else self.cfg.default_preset
        candidates = self.of(name) or self.servers
        up = [s for s in candidates if s.healthy and (s.router or s not in (tried or []))]
        if not up:
            why = "; ".join(f"{s.url}: {s.lost or ('failed this request' if s.healthy else 'not started')}"
                            for s in candidates)
            raise NoServer(f"no SGLang server of preset {name!r} is reachable ({why}); retrying")
        return min(up, key=lambda s: s.outstanding)

    def redact(self, text: str) -> str:
        """`text` naming no URL but the configured ones: a worker's (a router's, or one a
        server's message names) becomes "a worker"."""
        mine = {urlsplit(s.url).netloc for s in self.servers}

        def one(m: re.Match[str]) -> str:
            url = m[0].rstrip(".:;")  # the sentence's punctuation after it
            return m[0] if urlsplit(url).netloc in mine else "a worker" + m[0][len(url):]

        text = _URL.sub(one, text)
        for w in {urlsplit(w).netloc for s in self.servers for w in s.workers} - mine:
            text = re.sub(rf"(?<![\w.:]){re.escape(w)}(?!\d)", "a worker", text)
        return text

    def down_presets(self) -> list[str]:
        return [p for p in self.cfg.presets() if not any(s.healthy for s in self.of(p))]

    def status(self) -> list[dict[str, Any]]:
        return [{"url": s.url, "presets": s.presets, "router": s.router, "healthy": s.healthy,
                 "lost": s.lost and self.redact(s.lost), "outstanding": s.outstanding,
                 "model": self.redact(s.served), **({"workers": len(s.workers)} if s.router else {})}
                for s in self.servers]

    # -- probing --------------------------------------------------------------------------
    # The readiness routes, cheapest first. A worker's `/ready` (0.5.23
    # `srt/entrypoints/http_server.py:ready`) answers from the server's state at once, 503
    # while it starts; its `/health` runs a 1-token generation that takes 1-20 s and holds a
    # running slot (`health_generate`), so it is only the fallback for servers without
    # `/ready`. `sglang-router` 0.3.2 answers `/readiness` (200 while a worker is healthy).
    READY_PATHS = {False: ("/ready", "/health"), True: ("/readiness", "/health")}

    async def health(self, s: Server) -> int:
        """The HTTP status of the server's readiness route (HttpError when it cannot be reached)."""
        paths = (s.probe_path,) if s.probe_path else self.READY_PATHS[s.router]
        status = 404
        for path in paths:
            resp = await http.request(s.url, "GET", path, connect_timeout=self.cfg.connect_timeout_s,
                                      read_timeout=self.cfg.probe_timeout_s)
            await resp.body()
            status = resp.status
            if status != 404:
                s.probe_path = path
                return status
        return status

    async def check(self, s: Server) -> None:
        """Probe `s`; mark it lost unless it is ready or still streams."""
        try:
            status = await self.health(s)
        except http.HttpError as e:
            if not self.streaming(s):  # a busy server that streams is alive
                self.mark_lost(s, str(e))
            return
        if status != 200 and not self.streaming(s):
            self.mark_lost(s, f"{s.url}{s.probe_path}: HTTP {status}")

    def streaming(self, s: Server) -> bool:
        """A stream from `s` delivered data within the probe timeout: it is alive, however
        slowly it answers a probe."""
        return s.outstanding > 0 and time.monotonic() - s.last_data_at < self.cfg.probe_timeout_s

    async def model_info(self, url: str) -> dict[str, Any]:
        """`/model_info`, else the deprecated `/get_model_info` (older servers; the router)."""
        kw = {"connect_timeout": self.cfg.connect_timeout_s, "read_timeout": self.cfg.probe_timeout_s}
        try:
            info = await http.get_json(url, "/model_info", **kw)
        except http.HttpError as e:
            if e.status != 404:
                raise
            info = await http.get_json(url, "/get_model_info", **kw)
        if not isinstance(info, dict):
            raise http.HttpError(f"{url}/model_info: not a JSON object", 200, url=url)
        return info

    async def server_info(self, url: str) -> dict[str, Any]:
        """`/server_info` (else the deprecated `/get_server_info`): the server's resolved
        arguments (`sglang_models.capabilities` reads them); {} from a server that answers
        neither (what it can do is then unknown, and reported as not done)."""
        kw = {"connect_timeout": self.cfg.connect_timeout_s, "read_timeout": self.cfg.probe_timeout_s}
        for path in ("/server_info", "/get_server_info"):
            try:
                info = await http.get_json(url, path, **kw)
            except http.HttpError as e:
                log.info("%s%s: %s", url, path, e)
                continue
            return info if isinstance(info, dict) else {}
        return {}

    async def probe(self, s: Server) -> None:
        """Readiness, then the model of the server (of each worker behind a router). Raises
        HttpError (down or starting) or ModelMismatch (refused)."""
        status = await self.health(s)
        if status != 200:
            raise http.HttpError(f"{s.url}{s.probe_path}: HTTP {status}", status, url=s.url)
        kw = {"connect_timeout": self.cfg.connect_timeout_s, "read_timeout": self.cfg.probe_timeout_s}
        if s.router:
            listed = await http.get_json(s.url, "/workers", **kw)
            rows = listed.get("workers") if isinstance(listed, dict) else None
            s.workers = [str(w["url"]).rstrip("/") for w in (rows if isinstance(rows, list) else [])
                         if isinstance(w, dict) and isinstance(w.get("url"), str)]
            if not s.workers:
                log.warning("the router %s lists no workers: aborts cannot reach them", s.url)
        served = []
        for url in s.workers or [s.url]:
            info = await self.model_info(url)
            served.append(check_family(url, info, self.local_family, self.local_what))
        s.served = ", ".join(sorted(set(served)))
        s.infos = [await self.server_info(url) for url in s.workers or [s.url]]

    async def wait_up(self, s: Server, report: Callable[[str], None]) -> None:
        """At start: a server that refuses connections (not listening yet: SGLang listens
        only once its model is loaded) or answers 503 (warming up) is loading; it is waited
        for up to `start_timeout_s`, with progress, then probed. Past that it is marked lost
        (and retried in the background); ModelMismatch is raised."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.cfg.start_timeout_s
        for delay in reconnect.backoff(start=0.1, cap=2.0):
            if delay:
                await asyncio.sleep(delay)  # the retry schedule of a loading server
            try:
                await self.probe(s)
            except http.HttpError as e:
                if e.status in (503, None) and loop.time() < deadline:
                    s.lost = str(e)
                    why = "not listening yet" if e.status is None else "HTTP 503"
                    report(f"{s.url} is loading its model ({why})")
                    continue
                self.mark_lost(s, str(e))
                return
            s.healthy, s.lost = True, None
            return

    def failed(self, s: Server, reason: str) -> None:
        """A request to `s` failed although it answered: lost at the `LOST_AFTER`th in a row."""
        s.failures += 1
        if s.failures >= LOST_AFTER:
            self.mark_lost(s, f"{reason} ({s.failures} requests failed in a row)")

    def mark_lost(self, s: Server, reason: str) -> None:
        """`s` did not answer: down until a probe succeeds; the owner hears it once."""
        was = s.healthy
        s.healthy, s.lost = False, reason
        if s.retry is None and not self.closing:
            s.retry = asyncio.get_running_loop().create_task(self._recover(s))
        if was:
            log.warning("lost the SGLang server %s: %s", s.url, reason)
            self.on_change()

    async def _recover(self, s: Server) -> None:
        try:
            for delay in reconnect.backoff(first=0.1, start=0.2, cap=self.cfg.retry_cap_s):
                await asyncio.sleep(delay)  # the retry schedule, not a synchronisation
                try:
                    await self.probe(s)
                except ModelMismatch as e:
                    s.lost = str(e)
                    continue
                except http.HttpError as e:
                    s.lost = str(e)
                    continue
                except Exception as e:  # noqa: BLE001 - an answer not foreseen must not end recovery
                    log.warning("probing %s failed: %r", s.url, e)
                    s.lost = f"{s.url}: {e!r}"[:500]
                    continue
                s.healthy, s.lost, s.failures = True, None, 0
                log.warning("the SGLang server %s is back", s.url)
                self.on_change()
                return
        finally:
            s.retry = None

    async def close(self) -> None:
        self.closing = True
        tasks = [s.retry for s in self.servers if s.retry is not None]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
