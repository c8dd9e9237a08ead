"""Helpers of the daemon tests: a tiny random checkpoint (a real BPE tokenizer trained here on
the repository's own sources, a sharpened random model) and a daemon subprocess on loopback
with a temporary runtime dir. Readiness is the runtime file plus a health call, never a sleep."""

from __future__ import annotations

import asyncio
import json
import os
import queue
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.procs import stop_process

ROOT = Path(__file__).resolve().parents[3]
CORPUS = """
import os
import sys
from pathlib import Path


def fibonacci(n: int) -> int:
    if n < 2:
        return n
    return fibonacci(n - 1) + fibonacci(n - 2)


class Runtime:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.items: list[str] = []

    def add(self, item: str) -> None:
        for ch in item:
            if ch.isalnum():
                self.items.append(ch)
        print(len(self.items), file=sys.stderr)

    def read(self) -> str:
        with open(self.path, encoding="utf-8") as fh:
            return fh.read()


for i in range(10):
    value = {"key": i, "name": os.path.join("a", str(i))}
    while value["key"] > 0:
        value["key"] -= 1
"""


def build_tiny_checkpoint(out: Path) -> Path:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    from engine.model.checkpoint import save_checkpoint
    from engine.model.native import ModelConfig, Transformer
    from engine.prompt.tokenizer import SPECIAL_TOKEN_NAMES, special_tokens_of

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=512, special_tokens=list(SPECIAL_TOKEN_NAMES.values()),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    texts = [CORPUS] * 4  # fixed: the tiny model must not change when the repository does
    tok.train_from_iterator(texts, trainer=trainer)
    out.mkdir(parents=True, exist_ok=True)
    tok.save(str(out / "tokenizer.json"))
    cfg = ModelConfig(vocab_size=tok.get_vocab_size(), n_layer=2, n_head=4, n_kv_head=2, dim=64,
                      intermediate_size=128, max_seq_len=1024, block_size=4, special=special_tokens_of(tok))
    torch.manual_seed(0)
    model = Transformer(cfg)
    model.init_weights(0)
    with torch.no_grad():  # sharpen the random model so that confidences spread over (0, 1)
        model.tok_embeddings.weight.mul_(40.0)
        model.tok_embeddings.weight[: len(SPECIAL_TOKEN_NAMES)] = 0.0  # never predicts a special token
    save_checkpoint(model, out, out / "tokenizer.json")
    return out


def child_env(runtime_dir: Path, model_dir: Path | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env.update({"LLADA_RUNTIME_DIR": str(runtime_dir), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
                "PYTHONPATH": str(ROOT)})
    if model_dir is not None:
        env["LLADA_MODEL"] = str(model_dir)
    return env


@dataclass
class Daemon:
    proc: subprocess.Popen[bytes]
    url: str
    token: str | None
    runtime_dir: Path
    log: Path


def wait_runtime_file(runtime_dir: Path, proc: subprocess.Popen[bytes], log: Path,
                      timeout: float = 600.0) -> dict[str, object]:  # a watchdog: loads take 10x on a busy machine
    from engine.daemon.runtime import probe, runtime_file

    deadline = time.monotonic() + timeout
    path = runtime_file(runtime_dir)
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"daemon exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        if path.exists():
            info = json.loads(path.read_text())
            if info.get("pid") == proc.pid and probe(str(info["url"]), info.get("token"), timeout=5.0):
                return info
        time.sleep(0.05)  # polling the runtime file, not waiting for a fixed time
    raise TimeoutError(f"daemon not ready after {timeout}s:\n{log.read_text()[-3000:]}")


def start_daemon(runtime_dir: Path, model_dir: Path, *args: str) -> Daemon:
    runtime_dir.mkdir(parents=True, exist_ok=True)
    log = runtime_dir / "test-daemon.log"
    cmd = ["nice", "-n", "10", sys.executable, "-m", "engine.daemon.cli", "serve", "--model", str(model_dir),
           "--port", "0", "--threads", "1", *args]
    with log.open("wb") as fh:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=child_env(runtime_dir), stdout=fh, stderr=subprocess.STDOUT)
    info = wait_runtime_file(runtime_dir, proc, log)
    return Daemon(proc, str(info["url"]), info.get("token"), runtime_dir, log)  # type: ignore[arg-type]


def stop_daemon(d: Daemon) -> None:
    stop_process(d.proc, 15, 5)


@dataclass
class Served:
    """A real `engine.daemon.server.Daemon` object serving on loopback from a thread of this process
    (its limits set by the test; its state inspectable)."""

    daemon: Any
    url: str
    token: str | None
    thread: threading.Thread


def serve_in_thread(engine: Any, **cfg: Any) -> Served:
    from engine.daemon.server import Daemon, DaemonConfig

    d = Daemon(engine, DaemonConfig(register=False, **cfg))
    ready: queue.Queue[str] = queue.Queue()
    thread = threading.Thread(target=lambda: asyncio.run(d.serve(ready.put)), name="test-daemon", daemon=True)
    thread.start()
    return Served(d, ready.get(timeout=600), cfg.get("token"), thread)  # a watchdog, not a measure


def stop_served(s: Served) -> None:
    s.daemon.stop()
    s.thread.join(30)
