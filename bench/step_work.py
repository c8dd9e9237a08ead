"""Less work per step (issue 50 §3): each change measured against its baseline in the same run.

- `confidence`: the CPU confidence of a 32-row block over the LLaDA-8B vocabulary (126,464),
  bf16 and float32 logits: the one-pass chunked path (`kernels.eager` now) against the
  previous formulation (a float32 copy of every logit, `max`, `logsumexp`, a gather; kept here
  as `previous_confidence`), same logits, results checked equal (to 1e-5 relative). Logits
  drawn with a standard deviation of 4, and float32 ones with 20 (`fp32, wide`: a confident
  model's gaps to the maximum, past 87, where `exp` gives subnormal floats).
- `share`: the confidence's share of a step (one forward of a 32-token block plus its
  confidence) on a native model with the LLaDA-8B vocabulary at reduced width and depth
  (`--dim`, `--layers`; random bf16 weights, then float32 weights: a CPU without native bf16
  runs the bf16 forward many times slower, which hides the confidence), before and after.
  The native model's logits are float32 either way.
- `rotary`: a forward of the embedded model's shape (tiny-code, 32-token block): queries and
  keys rotated in one pass (`engine.model.native.Attention` now) against two passes (kept
  here as `two_pass_attention`); the logits are checked bit-identical.
- `gemm_layout`: tiny-code's forward of a decode step (a 16-token block over a 300-token KV
  cache) and of a 250-token prefill, its float32 linear weights as stored ([out, in]) against
  laid out [in, out] as the product loads them (`engine.model.checkpoint.cpu_gemm_layout`);
  the logits are checked bit-identical. Alternated `8 x --reps` times.
- `one_row`: tiny-code's decode step as an editor's request makes it (one cache row, a 16-token
  block over 300 slots, every key visible), its KV written by two slice copies and attention
  without a bias (`engine.model.kv_cache.span_of`, `native.all_visible`: the product's way) against the
  general way (an index_put, the folded bias); the logits are checked bit-identical.
  Alternated `8 x --reps` times.
- `no_mask`: tiny-code's requests through the product's step loop (`TextEngine.complete`, a few
  prompts to their first complete draft), one-row steps whose block sees every key skipping the
  attention mask (`engine.decoding.batch.sees_every_key`) against building it and letting the
  model drop it; ms a step to the first draft, the texts checked equal. Alternated `--reps` times.
- `rss`: a fresh process's peak RSS after `import engine.service` (before any model), with
  Triton imported as before (`TRITON_INTERPRET=1` forces it) and without (a CPU machine now).
- `cold_start`: a fresh process loads the embedded model (`TextEngine`, one thread): the load's
  seconds and the RSS after it, with the embedding table's random init on the meta device as
  before (its meta kernel imports torch._dynamo) and without it (`engine.model.native.embedding`
  now), alternated `--cold-reps` times each.

One torch thread (`--threads`), medians of `--reps`; the 1-minute load average is printed
(the machine may be shared: compare the ratios, measured side by side). A table, then one
JSON line.

    python bench/step_work.py [--quick] [--reps 15] [--dim 512] [--layers 2] [--threads 1]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from torch import Tensor  # noqa: E402

from engine.model import native  # noqa: E402
from engine.model.checkpoint import EMBEDDED_DIR, cpu_gemm_layout, load_checkpoint  # noqa: E402
from engine.model.native import Attention, CacheAt, ModelConfig, Transformer, apply_rope  # noqa: E402
from kernels.eager import eager_confidence_tensors  # noqa: E402

VOCAB = 126_464  # LLaDA-8B
ROWS = 32  # a block
WIDE = 20.0  # a logit spread (std) whose gaps to the maximum pass 87: exp's subnormal range


def previous_confidence(logits: Tensor, current: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """The confidence as the eager path computed it before: whole-tensor float32 copy, max,
    logsumexp (its own max and exp-sum pass), gather."""
    x = logits.float()
    top, top_id = x.max(dim=1)
    lse = torch.logsumexp(x, dim=1)
    return top_id, torch.exp(top - lse), torch.exp(x.gather(1, current[:, None]).squeeze(1) - lse)


def two_pass_attention(self: Attention, x: Tensor, cos: Tensor, sin: Tensor, mask: Tensor | None,
                       cache_at: CacheAt | None) -> Tensor:
    """The native attention as it was: queries, then keys, rotated apart (no cache here)."""
    c, (B, T, _) = self.c, x.shape
    hd = c.head_dim
    cos, sin = cos[:, :, 0, : hd // 2], sin[:, :, 0, hd // 2 :]  # the half tables of `rope_pair`'s
    q, k, v = self.wqkv(x).split([c.n_head * hd, c.n_kv_head * hd, c.n_kv_head * hd], dim=-1)
    q = apply_rope(q.view(B, T, c.n_head, hd), cos, sin)
    k = apply_rope(k.view(B, T, c.n_kv_head, hd), cos, sin)
    y = self._attend(q, k, v.view(B, T, c.n_kv_head, hd), mask)
    return self.wo(y.transpose(1, 2).reshape(B, T, c.n_head * hd))


def median_ms(fn: Callable[[], object], reps: int) -> float:
    fn()
    samples = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1000)
    return statistics.median(samples)


def interleaved(a: Callable[[], object], b: Callable[[], object], reps: int) -> tuple[float, float]:
    """Medians of `a` and `b`, alternated rep by rep (a load that comes and goes hits both)."""
    a(), b()
    ta, tb = [], []
    for _ in range(reps):
        ta.append(median_ms(a, 1))
        tb.append(median_ms(b, 1))
    return statistics.median(ta), statistics.median(tb)


def bench_confidence(reps: int) -> list[dict[str, Any]]:
    out = []
    g = torch.Generator().manual_seed(1)
    for name, dt, spread in (("bf16", torch.bfloat16, 4.0), ("fp32", torch.float32, 4.0),
                             ("fp32, wide", torch.float32, WIDE)):
        logits = (torch.randn(ROWS, VOCAB, generator=g) * spread).to(dt)
        cur = torch.randint(0, VOCAB, (ROWS,), generator=g)
        old = previous_confidence(logits, cur)
        new = eager_confidence_tensors(logits, cur)
        same = bool(torch.equal(old[0], new[0])) and bool(torch.allclose(old[1], new[1], rtol=1e-5, atol=1e-7))
        before, after = interleaved(lambda x=logits, c=cur: previous_confidence(x, c),  # type: ignore[misc]
                                    lambda x=logits, c=cur: eager_confidence_tensors(x, c), reps)  # type: ignore[misc]
        out.append({"dtype": name, "before_ms": round(before, 2), "after_ms": round(after, 2),
                    "speedup": round(before / after, 2), "same": same})
    return out


def bench_share(reps: int, dim: int, layers: int, weights: torch.dtype) -> dict[str, Any]:
    heads = max(1, dim // 128)
    cfg = ModelConfig(vocab_size=VOCAB, n_layer=layers, n_head=heads, n_kv_head=heads, dim=dim,
                      intermediate_size=int(dim * 2.75), max_seq_len=256, block_size=ROWS, tie_embeddings=False)
    model = Transformer(cfg)
    model.init_weights(0)
    model = model.to(weights).eval()
    ids = torch.randint(0, VOCAB, (1, ROWS))
    pos = torch.arange(ROWS)[None]
    cur = torch.randint(0, VOCAB, (ROWS,))
    with torch.no_grad():
        logits = model(ids, pos)[0]
        fwd = median_ms(lambda: model(ids, pos), reps)
    before, after = interleaved(lambda: previous_confidence(logits, cur),
                                lambda: eager_confidence_tensors(logits, cur), reps)
    return {"weights": str(weights).removeprefix("torch."), "dim": dim, "layers": layers, "forward_ms": round(fwd, 2),
            "confidence_before_ms": round(before, 2),
            "confidence_after_ms": round(after, 2), "share_before": round(before / (fwd + before), 3),
            "share_after": round(after / (fwd + after), 3),
            "share_ratio": round(after / (fwd + after) / (before / (fwd + before)), 3)}


def bench_rotary(reps: int) -> dict[str, Any]:
    model = load_checkpoint(EMBEDDED_DIR).eval()
    ids = torch.randint(0, model.config.vocab_size, (1, 32))
    pos = torch.arange(32)[None]
    fused = Attention.forward

    def run(forward: Callable[..., Tensor]) -> Tensor:
        Attention.forward = forward  # type: ignore[method-assign]
        try:
            with torch.no_grad():
                return model(ids, pos)
        finally:
            Attention.forward = fused  # type: ignore[method-assign]

    same = bool(torch.equal(run(fused), run(two_pass_attention)))
    before, after = interleaved(lambda: run(two_pass_attention), lambda: run(fused), reps)
    return {"model": "tiny-code", "tokens": 32, "before_ms": round(before, 3), "after_ms": round(after, 3),
            "speedup": round(before / after, 3), "bit_identical": same}


def step_of(vocab: int, tokens: int, kv_len: int) -> Callable[[Transformer], Tensor]:
    """A forward of `tokens` new tokens over a `kv_len`-slot cache row, for any model of `vocab`."""
    ids = torch.randint(8, vocab, (1, tokens), generator=torch.Generator().manual_seed(tokens))
    pos = torch.arange(kv_len - tokens, kv_len)[None]
    mask = torch.ones(1, 1, tokens, kv_len, dtype=torch.bool)
    rows = torch.zeros(1, dtype=torch.long)

    def run(m: Transformer) -> Tensor:
        with torch.inference_mode():
            return m(ids, pos, mask, rows=rows, slots=pos, kv_len=kv_len)

    return run


def bench_gemm_layout(reps: int) -> list[dict[str, Any]]:
    stored, laid = load_checkpoint(EMBEDDED_DIR), load_checkpoint(EMBEDDED_DIR)
    cpu_gemm_layout(laid)
    out = []
    for tokens, kv_len in ((16, 300), (250, 250)):
        for m in (stored, laid):
            m.setup_cache(1, 512)
        run = step_of(stored.config.vocab_size, tokens, kv_len)
        same = bool(torch.equal(run(stored), run(laid)))
        before, after = interleaved(functools.partial(run, stored), functools.partial(run, laid), 8 * reps)
        out.append({"tokens": tokens, "kv_len": kv_len, "before_ms": round(before, 3), "after_ms": round(after, 3),
                    "speedup": round(before / after, 3), "bit_identical": same})
    return out


def bench_one_row(reps: int) -> dict[str, Any]:
    model = load_checkpoint(EMBEDDED_DIR)
    cpu_gemm_layout(model)
    model.setup_cache(1, 512)
    run = step_of(model.config.vocab_size, 16, 300)
    short_ways = native.span_of, native.all_visible

    def general() -> Tensor:
        native.span_of, native.all_visible = lambda rows, slots: None, lambda mask: False  # type: ignore[assignment]
        try:
            return run(model)
        finally:
            native.span_of, native.all_visible = short_ways

    same = bool(torch.equal(general(), run(model)))
    before, after = interleaved(general, functools.partial(run, model), 8 * reps)
    return {"tokens": 16, "kv_len": 300, "before_ms": round(before, 3), "after_ms": round(after, 3),
            "speedup": round(before / after, 3), "bit_identical": same}


NO_MASK_PROMPTS = [("def area(width, height):\n    return ", "\n"),
                   ("import os\n\n\ndef list_files(path):\n    ", "\n\nprint(list_files('.'))\n"),
                   ("class Stack:\n    def __init__(self):\n        self.items = []\n\n    def push(self, x):\n"
                    "        ", "\n")]


def bench_no_mask(reps: int) -> dict[str, Any]:
    from engine.api import CompletionRequest, Plan
    from engine.decoding import batch
    from engine.service import TextEngine

    eng = TextEngine(threads=torch.get_num_threads())
    skips = batch.sees_every_key
    texts: dict[bool, list[str]] = {True: [], False: []}
    per_step: dict[bool, list[float]] = {True: [], False: []}

    def drafts(skip: bool) -> None:
        batch.sees_every_key = skips if skip else (lambda *a: False)  # type: ignore[assignment]
        try:
            for i, (prefix, suffix) in enumerate(NO_MASK_PROMPTS):
                eng.prompt_cache.clear()
                req = CompletionRequest(f"m{len(texts[skip])}", f"d{i}.py", prefix, suffix, Plan(max_tokens=24, max_lines=2))
                t0, first = time.perf_counter(), None
                for ev in eng.complete(req):
                    if first is None and (ev.draft_complete or ev.kind == "done"):
                        first = (time.perf_counter() - t0) * 1000 / max(1, ev.step)
                        texts[skip].append(ev.text)
                per_step[skip].append(first or 0.0)
        finally:
            batch.sees_every_key = skips

    for _ in range(reps):
        drafts(False)
        drafts(True)
    before, after = statistics.median(per_step[False]), statistics.median(per_step[True])
    return {"prompts": len(NO_MASK_PROMPTS), "before_ms_a_step": round(before, 3), "after_ms_a_step": round(after, 3),
            "speedup": round(before / after, 3), "same_texts": texts[True] == texts[False]}


def rss_mib(triton: bool) -> float:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    if triton:
        env["TRITON_INTERPRET"] = "1"
    # VmRSS of the child itself (ru_maxrss would carry this process's peak across exec)
    code = ("import re, engine.service; "
            "print(re.search(r'VmRSS:\\s+(\\d+)', open('/proc/self/status').read()).group(1))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    return round(int(out.stdout.split()[-1]) / 1024, 1)


COLD_CODE = """\
import re, sys, time
from torch import nn
import engine.model.native as native
if sys.argv[1] == "before":
    native.embedding = lambda rows, dim: nn.Embedding(rows, dim)
from engine.service import TextEngine
t = time.perf_counter()
TextEngine(threads=1)
rss = re.search(r"VmRSS:\\s+(\\d+)", open("/proc/self/status").read()).group(1)
print(time.perf_counter() - t, int(rss) / 1024, "torch._dynamo" in sys.modules)
"""


def bench_cold_start(reps: int) -> dict[str, Any]:
    runs: dict[str, list[tuple[float, float, bool]]] = {"before": [], "after": []}
    for _ in range(reps):
        for arm in runs:
            out = subprocess.run([sys.executable, "-c", COLD_CODE, arm], cwd=ROOT, capture_output=True, text=True,
                                 check=True).stdout.split()
            runs[arm].append((float(out[0]), float(out[1]), out[2] == "True"))
    res: dict[str, Any] = {"reps": reps}
    for arm, rs in runs.items():
        res[f"{arm}_load_s"] = round(statistics.median(r[0] for r in rs), 3)
        res[f"{arm}_rss_mib"] = round(statistics.median(r[1] for r in rs), 1)
        res[f"{arm}_dynamo"] = any(r[2] for r in rs)
    res["speedup"] = round(res["before_load_s"] / res["after_load_s"], 2)
    return res


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="3 reps, a 128-wide 1-layer model")
    p.add_argument("--reps", type=int, default=15)
    p.add_argument("--dim", type=int, default=512)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--cold-reps", type=int, default=5, help="cold starts per arm")
    args = p.parse_args(argv)
    if args.quick:
        args.reps, args.dim, args.layers, args.cold_reps = 3, 128, 1, 1
    torch.set_num_threads(args.threads)
    load = os.getloadavg()
    conf = bench_confidence(args.reps)
    share = [bench_share(args.reps, args.dim, args.layers, w) for w in (torch.bfloat16, torch.float32)]
    rotary = bench_rotary(args.reps)
    layout = bench_gemm_layout(args.reps)
    one_row = bench_one_row(args.reps)
    no_mask = bench_no_mask(args.reps)
    rss = {"with_triton_mib": rss_mib(True), "without_triton_mib": rss_mib(False)}
    cold = bench_cold_start(args.cold_reps)
    print(f"step work: {args.threads} torch thread(s), load {load[0]:.2f}, medians of {args.reps}")
    print(f"{'confidence 32 x 126,464':<28} {'before ms':>10} {'after ms':>9} {'ratio':>6} {'same':>5}")
    for r in conf:
        print(f"{r['dtype']:<28} {r['before_ms']:>10} {r['after_ms']:>9} {r['speedup']:>6} {r['same']!s:>5}")
    for sh in share:
        print(f"share of a step ({sh['weights']} weights, dim {sh['dim']}, {sh['layers']} layers, forward "
              f"{sh['forward_ms']} ms; float32 logits): {sh['share_before']} -> {sh['share_after']} "
              f"(x{sh['share_ratio']})")
    print(f"tiny-code forward, rotary in one pass: {rotary['before_ms']} -> {rotary['after_ms']} ms "
          f"(x{rotary['speedup']}, bit-identical: {rotary['bit_identical']})")
    for r in layout:
        print(f"tiny-code forward, {r['tokens']} tokens over {r['kv_len']}, weights laid out [in, out]: "
              f"{r['before_ms']} -> {r['after_ms']} ms (x{r['speedup']}, bit-identical: {r['bit_identical']})")
    print(f"tiny-code decode step, one row: slice writes, no bias: {one_row['before_ms']} -> {one_row['after_ms']} ms "
          f"(x{one_row['speedup']}, bit-identical: {one_row['bit_identical']})")
    print(f"tiny-code first drafts, the one-row block's mask skipped: {no_mask['before_ms_a_step']} -> "
          f"{no_mask['after_ms_a_step']} ms a step (x{no_mask['speedup']}, same texts: {no_mask['same_texts']})")
    print(f"RSS after import engine.service: {rss['with_triton_mib']} MiB with Triton, "
          f"{rss['without_triton_mib']} MiB without")
    print(f"cold start, embedded model: load {cold['before_load_s']} -> {cold['after_load_s']} s "
          f"(x{cold['speedup']}), RSS {cold['before_rss_mib']} -> {cold['after_rss_mib']} MiB, "
          f"torch._dynamo imported: {cold['before_dynamo']} -> {cold['after_dynamo']}")
    print(json.dumps({"bench": "step_work", "threads": args.threads, "load1": round(load[0], 2), "reps": args.reps,
                      "confidence": conf, "share": share, "rotary": rotary, "gemm_layout": layout, "one_row": one_row, "no_mask": no_mask, "rss": rss, "cold_start": cold}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
