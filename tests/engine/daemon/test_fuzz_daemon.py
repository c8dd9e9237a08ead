"""Fuzzing the daemon protocol against a real `llada-engine serve` process on loopback.

Each hypothesis example is one connection (`fuzz_frames.Case`): its frames are sent, then a
`health` probe whose answer shows everything before it was handled. Counted: frames, replies
by type and error code, closes the case allows (1009 after a frame above 4x the limit, 1008
before authentication, 1007 for invalid UTF-8), and failures: crashes (the process exited),
hangs (no answer to the probe in time) and unexpected disconnects. The daemon must end alive
and complete a valid request. CI runs a few hundred frames; `pytest -m fuzz` at least 10,000
(`LLADA_FUZZ_FRAMES` / `LLADA_FUZZ_SECONDS` change the count and the time bound)."""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import ClientConnection, connect

from tests.engine.daemon.daemon_helpers import Daemon, start_daemon, stop_daemon
from tests.engine.daemon.fuzz_frames import MAX_MESSAGE, PREFIX, TOKEN, Case, cases

PROBE_TIMEOUT = 60.0  # a probe unanswered this long is a hang


@dataclass
class Report:
    frames: int = 0
    connections: int = 0
    replies: Counter[str] = field(default_factory=Counter)
    closes: Counter[int] = field(default_factory=Counter)
    crashes: int = 0
    hangs: int = 0
    unexpected: list[str] = field(default_factory=list)  # unexpected disconnects (first ones)
    unexpected_count: int = 0

    def failed(self, what: str) -> None:
        self.unexpected_count += 1
        if len(self.unexpected) < 10:
            self.unexpected.append(what)

    def summary(self, seconds: float) -> dict[str, object]:
        return {"frames": self.frames, "connections": self.connections, "seconds": round(seconds, 1),
                "crashes": self.crashes, "hangs": self.hangs, "unexpected_disconnects": self.unexpected_count,
                "expected_closes": dict(self.closes), "replies": dict(self.replies.most_common()),
                "first_unexpected": self.unexpected}


@pytest.fixture(scope="module")
def fuzzed(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    run = tmp_path_factory.mktemp("fuzz-run")
    (run / "token").write_text(TOKEN + "\n")
    os.chmod(run / "token", 0o600)
    d = start_daemon(run, tiny_model_dir, "--max-batch", "2", "--prompt-cache", "4", "--max-prompt-tokens", "64",
                     "--max-prompt-chars", "2048", "--max-new-tokens", "16", "--deadline-ms", "5000",
                     "--max-message-bytes", str(MAX_MESSAGE))
    assert d.token == TOKEN
    yield d
    stop_daemon(d)


def open_case(url: str, case: Case) -> ClientConnection:
    headers = {"Authorization": f"Bearer {TOKEN}"} if case.auth == "header" else None
    return connect(url, additional_headers=headers, max_size=None, open_timeout=30, close_timeout=5)


def send_all(ws: ClientConnection, case: Case, report: Report) -> None:
    for f in case.frames:
        if isinstance(f.data, bytes):
            ws.send(f.data, text=f.text)
        else:
            ws.send(f.data)
        report.frames += 1


def read_until(ws: ClientConnection, report: Report, kinds: tuple[str, ...], key: str, value: str) -> None:
    """Count replies until one of `kinds` whose `key` is `value`; TimeoutError: a hang."""
    deadline = time.monotonic() + PROBE_TIMEOUT
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        msg = json.loads(ws.recv(left))
        kind = msg.get("type")
        report.replies[f"error:{msg.get('code')}" if kind == "error" else str(kind)] += 1
        if kind in kinds and msg.get(key) == value:
            return


def probe(ws: ClientConnection, n: int, report: Report) -> None:
    """health (everything before it was handled), then a short completion queued behind the
    case's requests (their events come meanwhile)."""
    ws.send(json.dumps({"type": "health", "ref": f"probe{n}"}))
    read_until(ws, report, ("health",), "ref", f"probe{n}")
    ws.send(json.dumps({"type": "complete", "id": f"sync{n}", "doc": "sync", "prefix": PREFIX,
                        "plan": {"max_tokens": 2}}))
    report.frames += 2
    read_until(ws, report, ("done", "error"), "id", f"sync{n}")


def run_case(d: Daemon, case: Case, report: Report) -> None:
    report.connections += 1
    try:
        with open_case(d.url, case) as ws:
            try:
                send_all(ws, case, report)
                probe(ws, report.connections, report)
            except ConnectionClosed as e:
                code = e.rcvd.code if e.rcvd is not None else None
                if code in case.allowed_closes:
                    report.closes[code] += 1
                else:
                    report.failed(f"closed {code} ({e.rcvd and e.rcvd.reason!r}) after {case.auth} "
                                  f"{[str(f.data)[:60] for f in case.frames[:4]]}")
            except TimeoutError:
                report.hangs += 1
    except (InvalidStatus, OSError) as e:
        report.failed(f"connect failed: {e!r}")
    if d.proc.poll() is not None:
        report.crashes += 1


def fuzz(d: Daemon, target_frames: int, seconds: float, derandomize: bool) -> dict[str, object]:
    report = Report()
    t0 = time.monotonic()

    @settings(max_examples=50, deadline=None, database=None, derandomize=derandomize, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(cases())
    def one(case: Case) -> None:
        if d.proc.poll() is None and time.monotonic() - t0 < seconds and report.frames < target_frames:
            run_case(d, case, report)

    while report.frames < target_frames and time.monotonic() - t0 < seconds and d.proc.poll() is None:
        one()
    summary = report.summary(time.monotonic() - t0)
    summary["alive"] = d.proc.poll() is None and alive_and_completing(d)
    return summary


def alive_and_completing(d: Daemon) -> bool:
    with connect(d.url, additional_headers={"Authorization": f"Bearer {TOKEN}"}, open_timeout=30) as ws:
        ws.send(json.dumps({"type": "complete", "id": "final", "doc": "final", "prefix": PREFIX, "suffix": "",
                            "plan": {"max_tokens": 4}}))
        while (msg := json.loads(ws.recv(PROBE_TIMEOUT)))["type"] not in ("done", "error") or msg["id"] != "final":
            pass
        return msg["type"] == "done"


def check(summary: dict[str, object], min_frames: int) -> None:
    print("\nfuzz report: " + json.dumps(summary))
    assert summary["alive"], summary
    assert summary["crashes"] == 0 and summary["hangs"] == 0, summary
    assert summary["unexpected_disconnects"] == 0, summary
    assert int(summary["frames"]) >= min_frames, summary  # type: ignore[call-overload]


def test_fuzz_short(fuzzed: Daemon) -> None:
    """The CI run: a few hundred frames, deterministic examples, well under a minute."""
    check(fuzz(fuzzed, 300, 45.0, derandomize=True), 300)


@pytest.mark.fuzz
@pytest.mark.timeout(3600)
def test_fuzz_long(fuzzed: Daemon) -> None:
    """Opt-in: `pytest -m fuzz tests/engine/daemon/test_fuzz_daemon.py -s` (>= 10,000 frames)."""
    frames = int(os.environ.get("LLADA_FUZZ_FRAMES", "10000"))
    check(fuzz(fuzzed, frames, float(os.environ.get("LLADA_FUZZ_SECONDS", "3000")), derandomize=False), frames)
