"""A real-size load: a random-weight checkpoint with LLaDA-8B's exact shape (the published
config.json, a tokenizer of the real 126,349 tokens for 126,464 rows, bf16 weights in ~1 GB
shards with model.safetensors.index.json; about 16 GB), written here and never committed,
loaded through the product in process (`TextEngine`) and in the daemon (`llada-engine serve`,
one completion over its websocket).

Measured, each in a fresh process: peak RSS (VmHWM) as a ratio of the weights' bytes (goal
<= 1.15), the load, the warm-up completion that pages the weights in, the time to the first
ghost text after it, and the CPU block step (a 32-token completion's time per forward).
Then the same checkpoint at float32 must be refused by the memory pre-flight.

    python bench/real_load.py --quick          # a scaled-down shape (d_model 1024, 4 layers)
    python bench/real_load.py --full           # LLaDA-8B's shape: needs ~19 GB free RAM, 17 GB disk
    python bench/real_load.py --smoke          # d_model 64, 2 layers: that the bench runs (tests/bench);
                                               # its output head drawn SMOKE_HEAD_SCALE x sharper
    python bench/real_load.py --family llada-moe [--quick|--full|--smoke]   # LLaDA-MoE-7B-A1B's shape

The checkpoint is written under --dir (default: the system temp dir) and deleted after.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.fakes.ckpt_writers import checkpoint_shapes, write_tokenizer  # noqa: E402
from tests.fakes.published import LLADA2_CHAT_TEMPLATE, LLADA_8B, LLADA_8B_TEMPLATE, LLADA_MOE_7B  # noqa: E402

SPECIAL = {126080: "<|startoftext|>", 126081: "<|endoftext|>", 126336: "<|mdm_mask|>",
           126346: "<|start_header_id|>", 126347: "<|end_header_id|>", 126348: "<|eot_id|>"}
QUICK = {"d_model": 1024, "n_layers": 4, "n_heads": 8, "n_kv_heads": 8, "mlp_hidden_size": 3072}
SMOKE = {"d_model": 64, "n_layers": 2, "n_heads": 4, "n_kv_heads": 4, "mlp_hidden_size": 128}
# LLaDA-MoE-7B-A1B (--family llada-moe): LLaDA2's tokenizer and template, 64 experts of 1024
MOE_SPECIAL = {156891: "<|startoftext|>", 156892: "<|endoftext|>", 156895: "<|mask|>", 156900: "<|role_end|>",
               157151: "<role>", 157152: "</role>"}
MOE_QUICK = {"hidden_size": 1024, "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 8,
             "moe_layer_freq": [1] * 4}
MOE_SMOKE = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4,
             "expert_intermediate_size": 32, "num_experts": 16, "moe_layer_freq": [1] * 2}
FAMILIES: dict[str, tuple[Any, ...]] = {  # name: (family, published config, quick, smoke, tokens, specials, template, end id, bos id)
    "llada-8b": ("llada", LLADA_8B, QUICK, SMOKE, 126349, SPECIAL, LLADA_8B_TEMPLATE, 126081, 126080),
    "llada-moe": ("llada_moe", LLADA_MOE_7B, MOE_QUICK, MOE_SMOKE, 157153, MOE_SPECIAL, LLADA2_CHAT_TEMPLATE,
                  156892, 156891),
}
SHARD_BYTES = 1 << 30
# --smoke: the output head's random weights this much larger, so that the random model is
# confident and commits several tokens a forward (8 forwards for 8 tokens instead of a block's 33;
# tests/engine/conftest.py sharpens its tiny model the same way); the other shapes keep 1
SMOKE_HEAD_SCALE = 30.0
HEADS = ("model.transformer.ff_out.weight", "lm_head.weight")  # the output projections of the families
PREFIX = "import math\n\n\ndef area(r):\n    return math.pi * r * r\n\n\ndef perimeter(r):\n    ret"


def write_checkpoint(out: Path, cfg: dict, name: str = "llada-8b", head_scale: float = 1.0) -> int:
    """The checkpoint of FAMILIES[name] in bf16 shards of about SHARD_BYTES, each tensor drawn and
    written in turn (the writer holds one shard at a time), the output head's scaled by
    `head_scale`; returns the weights' bytes."""
    import torch
    from safetensors.torch import save_file

    family, _, _, _, tokens, special, template, end, bos = FAMILIES[name]
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(cfg, indent=1))
    (out / "generation_config.json").write_text(json.dumps({"bos_token_id": bos, "eos_token_id": end,
                                                            "pad_token_id": end}))
    write_tokenizer(out, tokens, special)
    tc = {"bos_token": special[bos], "eos_token": special[end], "pad_token": special[end],
          "chat_template": template,
          "added_tokens_decoder": {str(i): {"content": t, "special": True} for i, t in special.items()}}
    if "<|mask|>" in special.values():
        tc["mask_token"] = "<|mask|>"
    (out / "tokenizer_config.json").write_text(json.dumps(tc))
    shapes = checkpoint_shapes(family, cfg)
    g = torch.Generator().manual_seed(0)
    groups: list[list[str]] = [[]]
    size = 0
    for n, s in shapes.items():
        b = 2 * int(torch.Size(s).numel())
        if groups[-1] and size + b > SHARD_BYTES:
            groups.append([])
            size = 0
        groups[-1].append(n)
        size += b
    weight_map: dict[str, str] = {}
    total = 0
    for k, names in enumerate(groups):
        part = {}
        for n in names:
            s = shapes[n]
            if n.endswith("norm.weight"):
                t = torch.ones(s, dtype=torch.bfloat16)
            else:
                scale = head_scale if n in HEADS else 1.0
                t = torch.randn(s, generator=g, dtype=torch.bfloat16).mul_(scale / s[-1] ** 0.5)
            part[n] = t
            total += t.numel() * 2
        fname = f"model-{k + 1:05d}-of-{len(groups):05d}.safetensors"
        save_file(part, str(out / fname), metadata={"format": "pt"})
        weight_map |= {n: fname for n in names}
        del part
    (out / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": total},
                                                                  "weight_map": weight_map}))
    return total


def peak_rss() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def child_inprocess(path: str, threads: int, max_tokens: int) -> dict:
    """Load with TextEngine in the checkpoint's bf16 (named: `auto` would compute a checkpoint that
    fits in half the free memory in float32 on a CPU without bf16 units), warm up, time the first ghost text."""
    import torch

    from engine.api import CompletionRequest, Plan
    from engine.service import TextEngine

    base = peak_rss()  # python, torch and the engine imported, no model
    t0 = time.perf_counter()
    eng = TextEngine(path, threads=threads, max_len=1024, dtype=torch.bfloat16)
    t_load = time.perf_counter() - t0
    t1 = time.perf_counter()
    list(eng.complete(CompletionRequest("warm", "w", "x = ", "", Plan(max_tokens=4))))  # pages the weights in
    t_warm = time.perf_counter() - t1
    t2 = time.perf_counter()
    first = None
    done = None
    for ev in eng.complete(CompletionRequest("r", "d", PREFIX, "\n", Plan(max_tokens=max_tokens, preset="speedy"))):
        if first is None:
            first = time.perf_counter() - t2
        done = ev
    total = time.perf_counter() - t2
    st = (done.stats if done is not None else None) or {}
    forwards = int(st.get("forwards", 0)) or 1
    return {"dtype": eng.info()["dtype"], "load_s": t_load, "warmup_s": t_warm, "first_ghost_s": first,
            "completion_s": total, "forwards": forwards, "step_s": total / forwards, "peak_rss": peak_rss(),
            "import_rss": base}


async def _daemon_request(url: str, max_tokens: int) -> tuple[float, float, int]:
    from engine.api import CompletionRequest, Plan
    from llada_lsp.engines.ws_engine import WsConnection

    conn = await WsConnection.open(url)
    try:
        t0 = time.perf_counter()
        first, last = None, None
        async for ev in conn.complete(CompletionRequest("r", "d", PREFIX, "\n", Plan(max_tokens=max_tokens))):
            first = first if first is not None else time.perf_counter() - t0
            last = ev
        st = (last.stats if last is not None else None) or {}
        if last is None or last.kind != "done" or last.reason in ("cancelled", "deadline"):
            raise SystemExit(f"the daemon's completion did not finish: {last}")
        return first or 0.0, time.perf_counter() - t0, int(st.get("forwards", 0)) or 1
    finally:
        await conn.close()


def run_daemon(path: str, threads: int, max_tokens: int) -> dict:
    """`llada-engine serve` (which warms up before it is ready); one completion; its VmHWM."""
    from engine.daemon import runtime

    run_dir = Path(tempfile.mkdtemp(prefix="real-load-"))
    t0 = time.perf_counter()
    # a long deadline: an 8B forward on one CPU thread takes longer than the default 30 s
    cmd = [sys.executable, "-m", "engine.daemon.cli", "serve", "--model", path, "--port", "0", "--no-token",
           "--max-batch", "1", "--threads", str(threads), "--deadline-ms", "3600000", "--dtype", "bfloat16"]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=dict(os.environ, LLADA_RUNTIME_DIR=str(run_dir), HF_HUB_OFFLINE="1"),
                            stdout=(run_dir / "daemon.log").open("wb"), stderr=subprocess.STDOUT)
    while (info := runtime.read_runtime(run_dir)) is None or info.get("pid") != proc.pid:
        if proc.poll() is not None:
            raise SystemExit(f"daemon exited: {(run_dir / 'daemon.log').read_text()[-2000:]}")
        time.sleep(0.5)
    t_ready = time.perf_counter() - t0
    try:
        first, total, forwards = asyncio.run(_daemon_request(info["url"], max_tokens))
        status = Path(f"/proc/{proc.pid}/status").read_text()
        hwm = next(int(x.split()[1]) * 1024 for x in status.splitlines() if x.startswith("VmHWM:"))
    finally:
        proc.terminate()
        proc.wait(30)
        shutil.rmtree(run_dir, ignore_errors=True)
    return {"ready_s": t_ready, "first_ghost_s": first, "completion_s": total, "forwards": forwards,
            "step_s": total / forwards, "peak_rss": hwm}


def refused_float32(path: str, available_gib: float | None) -> str:
    """The pre-flight's message for float32 (no weight is read), or "" if it was not refused.
    `available_gib`: plan against that much memory (the scaled-down run scales the machine too)."""
    cmd = [sys.executable, "-m", "engine.daemon.cli", "check", path, "--dtype", "float32"]
    cmd += ["--available-gib", str(available_gib)] if available_gib else []
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    return out.stderr.strip() if out.returncode == 3 else ""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    size = ap.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="a scaled-down shape (default)")
    size.add_argument("--full", action="store_true", help="LLaDA-8B's exact shape (~16 GB)")
    size.add_argument("--smoke", action="store_true", help="d_model 64, 2 layers (the bench's smoke test)")
    ap.add_argument("--family", choices=sorted(FAMILIES), default="llada-8b",
                    help="the published config whose shape is written (llada-moe: LLaDA-MoE-7B-A1B)")
    ap.add_argument("--dir", default=tempfile.gettempdir(), help="where the checkpoint is written (and deleted)")
    ap.add_argument("--threads", type=int, default=max(1, (os.cpu_count() or 2) - 1))
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--keep", action="store_true", help="keep the checkpoint")
    ap.add_argument("--path", help="measure this checkpoint (written by an earlier --keep run) instead of writing one")
    ap.add_argument("--skip-daemon", action="store_true", help="measure in process only")
    ap.add_argument("--skip-inprocess", action="store_true", help="measure the daemon only")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child_inprocess(args.child, args.threads, args.max_tokens)))
        return
    _, published, quick, smoke, *_ = FAMILIES[args.family]
    scaled = smoke if args.smoke else quick
    cfg = dict(published) if args.full else published | scaled
    given = args.path is not None
    path = Path(args.path) if given else Path(tempfile.mkdtemp(prefix=f"{args.family}-shape-", dir=args.dir))
    try:
        t0 = time.perf_counter()
        if given:
            weights = json.loads((path / "model.safetensors.index.json").read_text())["metadata"]["total_size"]
            cfg = json.loads((path / "config.json").read_text())
            args.full = all(cfg.get(k) == published[k] for k in scaled if k in published)
        else:
            weights = write_checkpoint(path, cfg, args.family, SMOKE_HEAD_SCALE if args.smoke else 1.0)
            print(f"wrote {weights / 2**30:.2f} GiB of bf16 weights in {time.perf_counter() - t0:.0f} s to {path}",
                  flush=True)
        inproc = None
        if not args.skip_inprocess:
            out = subprocess.run([sys.executable, __file__, "--child", str(path), "--threads", str(args.threads),
                                  "--max-tokens", str(args.max_tokens)], cwd=ROOT, capture_output=True, text=True)
            if out.returncode != 0:
                raise SystemExit(out.stderr[-3000:])
            inproc = json.loads(out.stdout.strip().splitlines()[-1])
            print("in process:", json.dumps(inproc), flush=True)
        daemon = None if args.skip_daemon else run_daemon(str(path), args.threads, args.max_tokens)
        print("daemon:", json.dumps(daemon), flush=True)
        # the scaled run plans against memory scaled like the machine's: 24 GiB for 15 GiB of weights
        refusal = refused_float32(str(path), None if args.full else round(weights * 24 / 15 / 2**30, 3))
    finally:
        if not args.keep and not given:
            shutil.rmtree(path, ignore_errors=True)
    full_name = "LLaDA-8B" if args.family == "llada-8b" else "LLaDA-MoE-7B-A1B"
    shape = full_name if args.full else f"{full_name} scaled " + ",".join(f"{k}={v}" for k, v in scaled.items())
    print(f"\nshape: {shape}; weights {weights / 2**30:.2f} GiB bf16; threads {args.threads}")
    base = inproc["import_rss"] if inproc else 0
    print(f"(RSS of the interpreter with torch and the engine imported, before any model: {base / 2**30:.2f} GiB)")
    print("| path | dtype | load / ready s | warm-up s | first ghost text s | block step s | peak RSS GiB "
          "| RSS / weights | (RSS - imports) / weights |")
    print("|---|---|---|---|---|---|---|---|---|")
    if inproc:
        print(f"| in process | {inproc['dtype']} | {inproc['load_s']:.1f} | {inproc['warmup_s']:.1f} | "
              f"{inproc['first_ghost_s']:.2f} | {inproc['step_s']:.2f} | {inproc['peak_rss'] / 2**30:.2f} | "
              f"{inproc['peak_rss'] / weights:.2f} | {(inproc['peak_rss'] - base) / weights:.2f} |")
    if daemon is not None:
        print(f"| daemon | bfloat16 | {daemon['ready_s']:.1f} (incl. warm-up) | - | {daemon['first_ghost_s']:.2f} | "
              f"{daemon['step_s']:.2f} | {daemon['peak_rss'] / 2**30:.2f} | {daemon['peak_rss'] / weights:.2f} | "
              f"{(daemon['peak_rss'] - base) / weights:.2f} |")
    print(f"float32 refused by the pre-flight: {'yes' if refusal else 'NO'}" + (f" ({refusal})" if refusal else ""))
    print(json.dumps({"bench": "real_load", "shape": shape, "weights_bytes": weights, "inprocess": inproc,
                      "daemon": daemon, "float32_refused": bool(refusal)}))


if __name__ == "__main__":
    main()
