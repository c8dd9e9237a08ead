"""This engine against llama.cpp's `llama-diffusion-cli` on the same LLaDA-8B-architecture
checkpoint (bench/peer_ckpt.py: the published config shrunk in depth and width, head dim 128,
the 126,464-row vocabulary, random bf16 weights; llama.cpp runs its own conversion of it).

    bash bench/peer_llamacpp_build.sh          # once: builds llama.cpp under ~/.cache/llada-lsp
    python bench/peer_llamacpp.py [--prompts 32,224] [--gen 32] [--block 32] [--steps 4]
                                  [--threads 1,2] [--reps 2] [--llama-cli PATH] [--ckpt DIR]
                                  [--engine-dtype auto|bfloat16|float32]
    python bench/peer_llamacpp.py --smoke      # the engine half only, smallest shape (tests/bench)

Both decode `--gen` new tokens after a prompt of exactly P tokens (each checked: llama-tokenize
for llama.cpp, the engine's own prompt layout for the engine) in blocks of `--block` with
`--steps` forwards per block and a fixed share of the block committed per step (llama.cpp's
block schedule; the engine's `low_confidence` policy: LLaDA's schedule). What each forward
computes differs, and that is what is compared:
  llama.cpp  has no KV cache for LLaDA: every step is a forward over the whole sequence
             (P + gen tokens) with logits for every position. Its CLI also splits the whole
             sequence (prompt included) into blocks, so it runs one extra forward for each
             block that lies inside the prompt (P / block of them; they commit nothing).
  engine     each block's first step is one forward over the whole canvas with logits for the
             block only; its other steps feed the block alone and read the rest from the
             approximate KV cache (engine.decoding.decode_bidir).
Both time the decode only (llama.cpp's own "total time", the engine's `complete` call; the
model is loaded before); the engine is warmed up at each prompt length, llama.cpp runs with
--no-mmap so its weights are in memory before its timer. llama.cpp samples with its CLI defaults (the
README's LLaDA invocation, seed fixed); the engine takes the argmax. The engine loads the
checkpoint as the product does (`auto`: its bf16 on a CPU with bf16 matrix units, float32 on other
CPUs where that takes at most half the free memory: torch's bf16 matmuls are several times slower
there, ggml's are not; the dtype used is in each row); `--engine-dtype bfloat16` or `float32` forces one. `llama_no_empty` is
llama.cpp's time less its empty-block forwards (time per forward from its forward time). The
arms alternate within each rep; the 1-minute load average is recorded at each run. A table,
then one JSON line. Without the binary: how to build it, exit 2.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CACHE = Path.home() / ".cache" / "llada-lsp"
DEFAULT_CLI = CACHE / "llama.cpp" / "build" / "bin" / "llama-diffusion-cli"
LINE = "def area(r):\n    return 3.14159 * r * r\n\n\nclass Shape:\n    pass\n\n\n"  # no "qz": one token a byte
TOTAL = re.compile(r"total time: ([0-9.]+)ms, time per step: [0-9.]+ms, sampling time per step: ([0-9.]+)ms")


def text_of(n_bytes: int) -> str:
    return (LINE * (n_bytes // len(LINE) + 1))[:n_bytes - 1] + "\n"


def llama_prompt(tokenize: Path, gguf: Path, p: int) -> str:
    """A prompt that llama.cpp tokenizes into exactly `p` tokens (its BOS included)."""
    text = text_of(p - 1)
    out = subprocess.run([str(tokenize), "-m", str(gguf), "-p", text, "--ids", "--log-disable"],
                         capture_output=True, text=True, check=True).stdout
    ids = json.loads(out.strip().splitlines()[-1])
    if len(ids) != p:
        raise SystemExit(f"llama.cpp tokenizes the {p}-token prompt into {len(ids)} tokens")
    return text


def engine_prompt(engine: Any, p: int) -> str:
    """A prefix that the engine lays out as exactly `p` prompt tokens (nothing healed)."""
    for n in range(p - 2, p + 3):
        ids, suffix, partial, _ = engine.layout(text_of(n), "")
        if len(ids) == p and not suffix and not partial:
            return text_of(n)
    raise SystemExit(f"no prefix gives the engine a {p}-token prompt")


class EngineWorker:
    """A child process that holds one TextEngine at a fixed thread count (each count its own
    process: torch's thread count is per process) and decodes on request."""

    def __init__(self, ckpt: Path, threads: int, a: argparse.Namespace) -> None:
        cmd = [sys.executable, __file__, "--worker", str(threads), "--ckpt", str(ckpt), "--gen", str(a.gen),
               "--block", str(a.block), "--steps", str(a.steps), "--engine-dtype", a.engine_dtype]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def ask(self, p: int) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(f"{p}\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"the engine worker exited ({self.proc.wait()})")
        return json.loads(line)

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(60)


def worker(a: argparse.Namespace) -> int:
    """--worker T: load the engine at T threads, warm it up, then for each prompt length read
    from stdin decode one completion and print its result as a JSON line (after an untimed one
    at each new length)."""
    import torch

    from engine.service import TextEngine

    dtype = None if a.engine_dtype == "auto" else getattr(torch, a.engine_dtype)
    engine = TextEngine(a.ckpt, threads=a.worker, max_len=1024, prompt_format="plain", dtype=dtype)
    run_engine(engine, "x = ", a)  # the warm-up on the measured schedule (a default plan runs many more steps)
    prompts: dict[int, str] = {}
    for line in sys.stdin:
        p = int(line)
        if p not in prompts:  # the first completion at a new length is not timed
            prompts[p] = engine_prompt(engine, p)
            run_engine(engine, prompts[p], a)
        print(json.dumps(run_engine(engine, prompts[p], a) | {"dtype": engine.info()["dtype"]}), flush=True)
    return 0


def run_llama(cli: Path, gguf: Path, prompt: str, p: int, a: argparse.Namespace, threads: int) -> dict[str, Any]:
    blocks = (p + a.gen) // a.block
    cmd = [str(cli), "-m", str(gguf), "-p", prompt, "-ub", str(p + a.gen), "-b", str(p + a.gen),
           "-c", str(p + a.gen), "--diffusion-block-length", str(a.block), "--diffusion-steps",
           str(a.steps * blocks), "-t", str(threads), "-tb", str(threads), "--seed", "0", "--no-mmap"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    out = r.stdout + r.stderr
    m = TOTAL.search(out)
    if r.returncode != 0 or m is None:
        raise SystemExit(f"llama-diffusion-cli failed ({r.returncode}):\n{out[-3000:]}")
    total_s, sampling_s = float(m.group(1)) / 1e3, float(m.group(2)) / 1e3 * a.steps * blocks
    forwards = out.count("diffusion step:")
    useful = a.steps * (a.gen // a.block)
    per_forward = (total_s - sampling_s) / forwards
    return {"s": total_s, "forwards": forwards, "sampling_s": sampling_s,
            "s_no_empty": total_s - per_forward * (forwards - useful)}


def run_engine(engine: Any, prompt: str, a: argparse.Namespace) -> dict[str, Any]:
    from engine.api import CompletionRequest, Plan
    from engine.decoding.policies import make_policy

    plan = Plan(max_tokens=a.gen, preset="low_confidence", alternatives=1)
    req = CompletionRequest(f"peer-{time.monotonic_ns()}", "peer", prompt, "", plan)
    t0 = time.perf_counter()
    events = list(engine.complete(req, policy=make_policy("low_confidence", steps=a.steps)))
    s = time.perf_counter() - t0
    done = events[-1]
    forwards = int((done.stats or {}).get("forwards", 0))
    if done.kind != "done" or forwards != a.steps * (a.gen // a.block):
        raise SystemExit(f"the engine did not run the full schedule: {done.kind} after {forwards} forwards")
    return {"s": s, "forwards": forwards}


def median(rows: list[dict[str, Any]], key: str) -> float:
    return statistics.median(r[key] for r in rows)


def summarize(p: int, t: int, lrows: list[dict[str, Any]], erows: list[dict[str, Any]], gen: int) -> dict[str, Any]:
    row: dict[str, Any] = {"prompt": p, "threads": t, "engine_tok_s": gen / median(erows, "s"),
                           "engine_forwards": erows[0]["forwards"], "engine_dtype": erows[0]["dtype"],
                           "engine_s": [r["s"] for r in erows]}
    if lrows:
        row |= {"llama_tok_s": gen / median(lrows, "s"), "llama_forwards": lrows[0]["forwards"],
                "llama_s": [r["s"] for r in lrows],
                "llama_sampling_share": median(lrows, "sampling_s") / median(lrows, "s"),
                "llama_no_empty_tok_s": gen / median(lrows, "s_no_empty")}
        row["ratio"] = row["engine_tok_s"] / row["llama_tok_s"]
        row["ratio_no_empty"] = row["engine_tok_s"] / row["llama_no_empty_tok_s"]
    loads = [r["load"] for r in lrows + erows]
    row["load"] = [min(loads), max(loads)]
    return row


def print_table(rows: list[dict[str, Any]]) -> None:
    print(f"{'prompt':>6} {'thr':>3} {'llama tok/s':>11} {'fwd':>4} {'engine tok/s':>12} {'fwd':>4} {'dtype':>8} "
          f"{'ratio':>6} {'ratio*':>6}  load")
    for r in rows:
        ll = f"{r['llama_tok_s']:11.2f} {r['llama_forwards']:4d}" if "llama_tok_s" in r else f"{'-':>11} {'-':>4}"
        ratio = f"{r['ratio']:6.2f} {r['ratio_no_empty']:6.2f}" if "ratio" in r else f"{'-':>6} {'-':>6}"
        print(f"{r['prompt']:6d} {r['threads']:3d} {ll} {r['engine_tok_s']:12.2f} {r['engine_forwards']:4d} "
              f"{r['engine_dtype']:>8} {ratio}  {r['load'][0]:.1f}-{r['load'][1]:.1f}")
    print("ratio: engine tok/s / llama.cpp tok/s; ratio*: against llama.cpp less its empty-block forwards")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--llama-cli", type=Path, default=DEFAULT_CLI)
    ap.add_argument("--ckpt", type=Path, help="a LLaDA checkpoint directory (default: written under --dir)")
    ap.add_argument("--dir", type=Path, default=CACHE / "peer")
    ap.add_argument("--prompts", default="32,224")
    ap.add_argument("--gen", type=int, default=32)
    ap.add_argument("--block", type=int, default=32)
    ap.add_argument("--steps", type=int, default=4, help="forwards per block")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--engine-dtype", default="auto", choices=("auto", "bfloat16", "float32"),
                    help="auto: as the product loads it (float32 on a CPU without bf16 units where memory allows)")
    ap.add_argument("--smoke", action="store_true", help="the engine half only, smallest shape, one rep")
    ap.add_argument("--worker", type=int, default=0, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker:
        return worker(a)
    cli = a.llama_cli.expanduser()
    if not a.smoke and not cli.is_file():
        print(f"llama-diffusion-cli not found at {cli}.\nBuild it (about 15 min on 2 cores) with:\n"
              f"    bash bench/peer_llamacpp_build.sh\nor pass --llama-cli PATH (--smoke runs the engine half only).",
              file=sys.stderr)
        return 2
    if a.gen % a.block:
        raise SystemExit("--gen must be a multiple of --block")
    prompts = [int(x) for x in a.prompts.split(",")]
    threads = [int(x) for x in a.threads.split(",")]
    if any(p % a.block for p in prompts):
        raise SystemExit("each prompt length must be a multiple of --block (llama.cpp's blocks start at 0)")
    # torch: imported once the arguments hold
    from bench.peer_ckpt import SHAPE, SMOKE, ensure_checkpoint

    tmp = None
    if a.smoke:
        tmp = Path(tempfile.mkdtemp(prefix="peer-smoke-"))
        ckpt = ensure_checkpoint(tmp / "ckpt", SMOKE)
    else:
        a.dir.mkdir(parents=True, exist_ok=True)
        ckpt = a.ckpt or ensure_checkpoint(a.dir / "ckpt", SHAPE)
    try:
        shape = json.loads((ckpt / "config.json").read_text())
        rows = measure(a, ckpt, cli, prompts, threads)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    print_table(rows)
    commit = (cli.parent.parent.parent / "COMMIT") if not a.smoke else None
    print(json.dumps({"bench": "peer_llamacpp", "smoke": a.smoke,
                      "llama_cpp": commit.read_text().strip() if commit and commit.exists() else None,
                      "shape": {k: shape[k] for k in ("d_model", "n_heads", "mlp_hidden_size", "n_layers",
                                                      "embedding_size")},
                      "engine_dtype": a.engine_dtype, "gen": a.gen, "block": a.block, "steps_per_block": a.steps, "rows": rows}))
    return 0


def measure(a: argparse.Namespace, ckpt: Path, cli: Path, prompts: list[int], threads: list[int]) -> list[dict]:
    from bench.peer_ckpt import ensure_gguf

    gguf = None if a.smoke else ensure_gguf(ckpt, cli.parent.parent.parent / "src", a.dir / "llada-peer-bf16.gguf")
    l_prompt = {p: llama_prompt(cli.parent / "llama-tokenize", gguf, p) for p in prompts} if gguf else {}
    workers = {t: EngineWorker(ckpt, t, a) for t in threads}
    runs: dict[tuple[int, int], tuple[list, list]] = {(p, t): ([], []) for p in prompts for t in threads}
    try:
        for rep in range(1 if a.smoke else a.reps):
            for p in prompts:
                for t in threads:
                    lrows, erows = runs[(p, t)]
                    for arm in (["llama", "engine"] if (rep + p // a.block + t) % 2 == 0 else ["engine", "llama"]):
                        load = os.getloadavg()[0]
                        if arm == "engine":
                            erows.append(workers[t].ask(p) | {"load": load})
                        elif gguf is not None:
                            lrows.append(run_llama(cli, gguf, l_prompt[p], p, a, t) | {"load": load})
    finally:
        for w in workers.values():
            w.close()
    return [summarize(p, t, *runs[(p, t)], a.gen) for p in prompts for t in threads]


if __name__ == "__main__":
    raise SystemExit(main())
