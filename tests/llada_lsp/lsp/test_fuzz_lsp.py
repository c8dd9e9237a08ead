"""Fuzzing the LSP protocol against the real server process over stdio (all local).

Batches of valid and mutated frames (tests/llada_lsp/fuzz_messages.py) are written to the
server's stdin; after each batch a pad of blank lines and a `llada/debugInfo` probe must be
answered. Every answer must be well-formed JSON-RPC, and no request may get an Internal
Error (-32603: an unhandled exception). Crashes (the process ended) and hangs (no answer to
the probe within `HANG_S`) fail the run; resyncs (junk skipped before a header) are counted.

- CI: hypothesis drives 100 batches (a few hundred messages, well under a minute);
- `pytest -m fuzz tests/llada_lsp/lsp/test_fuzz_lsp.py -s`: >= 10,000 messages (`LLADA_FUZZ_MESSAGES`,
  `LLADA_FUZZ_SEED`), bounded by `LLADA_FUZZ_MAX_S` (default 1200 s); prints its figures
  and ends with the server alive and answering a valid request;
- the lifecycle is fuzzed on fresh servers: random sequences of initialize, shutdown,
  requests and notifications, each answer checked against a model of the LSP lifecycle.
"""

from __future__ import annotations

import json
import os
import random
import select
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.llada_lsp.fuzz_messages import PAD, Generator, frame
from tests.llada_lsp.lsp_helpers import ROOT

HANG_S = 60.0
KNOWN_CODES = {-32700, -32600, -32601, -32602, -32002, -32800, -32801, -32803}
INIT = {"capabilities": {}, "initializationOptions": {"engine": "ws://127.0.0.1:9"}}


class Server:
    """The server process, its framed output read with a deadline (select, no threads)."""

    def __init__(self, log: Path) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
        self.log = log
        self.proc = subprocess.Popen([sys.executable, "-m", "llada_lsp", "-v"], cwd=ROOT, env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=log.open("wb"))
        self.buf = b""
        self.probe_id = 0
        self.codes: Counter[str] = Counter()
        self.messages = 0

    def write(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def read(self, deadline: float) -> dict[str, Any] | None:
        """The next message, or None at the deadline; EOFError when the process ended."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while True:
            head = self.buf.find(b"\r\n\r\n")
            if head >= 0:
                length = int(self.buf[:head].split(b"Content-Length:")[1].split(b"\r\n")[0])
                if len(self.buf) >= head + 4 + length:
                    body = self.buf[head + 4: head + 4 + length]
                    self.buf = self.buf[head + 4 + length:]
                    return json.loads(body)
            ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                return None
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                raise EOFError(f"the server ended (status {self.proc.wait()})")
            self.buf += chunk

    def answer(self, msg_id: Any) -> dict[str, Any]:
        deadline = time.monotonic() + HANG_S
        while True:
            m = self.read(deadline)
            if m is None:
                raise TimeoutError(f"hang: no answer to {msg_id} within {HANG_S} s")
            if "method" not in m:
                self.check(m)
                if m.get("id") == msg_id:
                    return m

    def check(self, m: dict[str, Any]) -> None:
        assert m.get("jsonrpc") == "2.0" and "id" in m, m
        assert ("result" in m) != ("error" in m), m
        if "error" in m:
            code = m["error"]["code"]
            assert code in KNOWN_CODES, m  # -32603: an unhandled exception in the server
            self.codes[str(code)] += 1
        else:
            self.codes["result"] += 1

    def probe(self, data: bytes = b"") -> dict[str, Any]:
        """Write `data`, the pad and a debugInfo request; its answer."""
        self.probe_id -= 1
        body = json.dumps({"jsonrpc": "2.0", "id": self.probe_id, "method": "llada/debugInfo"})
        self.write(data + PAD + frame(body.encode()))
        a = self.answer(self.probe_id)
        assert "options" in a.get("result", {}), a
        return a

    def close(self) -> int | None:
        if self.proc.poll() is None:
            self.proc.kill()
        return self.proc.wait()

    def resyncs(self) -> int:
        text = self.log.read_text(errors="replace")
        return text.count("outside any message") + text.count("resynchronised")


def start(log: Path) -> Server:
    s = Server(log)
    s.write(frame(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INIT}).encode()))
    s.answer(1)
    s.write(frame(b'{"jsonrpc": "2.0", "method": "initialized", "params": {}}'))
    return s


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    s = start(tmp_path_factory.mktemp("fuzz") / "server.log")
    yield s
    s.close()


@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 2**32 - 1))
def test_fuzz_batches_keep_the_server_answering(server: Server, seed: int) -> None:
    batch = Generator(random.Random(seed), first_id=seed % 10**6 * 10).batch()
    server.messages += len(batch)
    server.probe(b"".join(batch))


def test_fuzz_ends_alive_and_answering(server: Server) -> None:
    server.probe()
    assert server.proc.poll() is None
    assert server.messages >= 100


LIFECYCLE_OPS = ["initialize", "shutdown", "llada/debugInfo", "didOpen", "initialized", "exit"]


def expected(phase: str, op: str) -> tuple[str, Any]:
    """(next phase, the answer's code: "result", an error code, None for no answer, or
    "exit <status>") under the LSP lifecycle."""
    if op == "exit":
        return "gone", f"exit {0 if phase == 'shutting down' else 1}"
    if op in ("didOpen", "initialized"):
        return phase, None
    if phase == "new":
        return ("running", "result") if op == "initialize" else (phase, -32002)
    if phase == "running":
        if op == "initialize":
            return phase, -32600
        return ("shutting down" if op == "shutdown" else phase), "result"
    return phase, -32600


def run_lifecycle(ops: list[str], log: Path) -> None:
    s = Server(log)
    phase = "new"
    try:
        for i, op in enumerate(ops, start=2):
            phase, want = expected(phase, op)
            if op in ("didOpen", "initialized", "exit"):
                params = {"textDocument": {"uri": "file:///l.py", "languageId": "python",
                                           "version": 1, "text": "x"}} if op == "didOpen" else {}
                method = {"didOpen": "textDocument/didOpen"}.get(op, op)
                s.write(frame(json.dumps({"jsonrpc": "2.0", "method": method, "params": params}).encode()))
            else:
                s.write(frame(json.dumps({"jsonrpc": "2.0", "id": i, "method": op,
                                          "params": INIT if op == "initialize" else {}}).encode()))
            if isinstance(want, str) and want.startswith("exit"):
                assert s.proc.wait(timeout=HANG_S) == int(want.split()[1]), ops
                return
            if want is not None:
                a = s.answer(i)
                got = "result" if "result" in a else a["error"]["code"]
                assert got == want, (ops[: i - 1], a)
    finally:
        s.close()


@settings(max_examples=int(os.environ.get("LLADA_FUZZ_LIFECYCLES", "6")), deadline=None,
          suppress_health_check=list(HealthCheck))
@given(ops=st.lists(st.sampled_from(LIFECYCLE_OPS), min_size=1, max_size=8))
def test_fuzz_the_lifecycle_follows_the_model(tmp_path_factory: pytest.TempPathFactory,
                                              ops: list[str]) -> None:
    run_lifecycle(ops, tmp_path_factory.mktemp("life") / "server.log")


@pytest.mark.fuzz
def test_fuzz_ten_thousand_messages(tmp_path: Path) -> None:
    total = int(os.environ.get("LLADA_FUZZ_MESSAGES", "10000"))
    seed = int(os.environ.get("LLADA_FUZZ_SEED", "31"))
    budget = float(os.environ.get("LLADA_FUZZ_MAX_S", "1200"))
    gen = Generator(random.Random(seed))
    s = start(tmp_path / "server.log")
    t0 = time.monotonic()
    crashes = hangs = batches = 0
    try:
        while s.messages < total and time.monotonic() - t0 < budget:
            batch = gen.batch()
            s.messages += len(batch)
            batches += 1
            try:
                s.probe(b"".join(batch))
            except EOFError:
                crashes += 1
                raise
            except TimeoutError:
                hangs += 1
                raise
        s.probe()  # alive and answering a valid request
    finally:
        report = {"messages": s.messages, "batches": batches, "probes": batches + 1,
                  "crashes": crashes, "hangs": hangs, "resyncs": s.resyncs(),
                  "answers": dict(s.codes), "seconds": round(time.monotonic() - t0, 1),
                  "seed": seed}
        s.close()
        print("\nfuzz:", json.dumps(report))
    assert s.messages >= total, f"time budget spent after {s.messages} messages"
