"""Model contract: cached decoding equals uncached forwards; checkpoints load both ways."""

from __future__ import annotations

from pathlib import Path

import torch

from engine.decoding.batch import execute, new_slot_attrs
from engine.decoding.decode import Sequence
from engine.decoding.policies import make_policy
from engine.model.checkpoint import load_checkpoint, save_checkpoint
from engine.model.kv_cache import row_runs
from engine.model.native import CLEAN, NOISY, Transformer, embedding, layout_mask
from tests.engine.conftest import prompt_of

# fp32 on the CPU: cached and uncached paths sum in different orders, nothing more
ATOL = 1e-4


def uncached_logits(model: Transformer, canvas: list[int], block_start: int) -> torch.Tensor:
    """Full forward over prompt + finished blocks (clean, causal) + active block (noisy)."""
    n = len(canvas)
    idx = torch.tensor([canvas])
    pos = torch.arange(n)[None]
    kind = torch.tensor([[CLEAN] * block_start + [NOISY] * (n - block_start)])
    blk = torch.tensor([[-1] * block_start + [block_start] * (n - block_start)])
    with torch.no_grad():
        return model(idx, pos, layout_mask(kind, pos, blk, kind, pos, blk))[0]


def test_cached_steps_match_uncached_forward(tiny: Transformer) -> None:
    cfg = tiny.config
    prompt = prompt_of(cfg, list(range(10, 30)), list(range(40, 47)))
    seq = Sequence(prompt, cfg.special, make_policy("threshold", threshold=0.3), cfg.block_size, 12,
                   cfg.shift_logits, max_len=512)
    attrs = new_slot_attrs(512, 0)
    checked = 0
    while not seq.done():
        feed = seq.prepare()
        canvas = [*prompt, *seq.middle.tolist()][: seq.P + seq.block_start + cfg.block_size]
        s = seq.P + seq.block_start
        ref = uncached_logits(tiny, canvas, s)
        (got,) = execute(tiny, [seq], [feed], [attrs])
        # rows: head (clean output at s-1, when fed) + noisy outputs at s..s+b-2
        want_rows = ([s - 1] if feed.kind[0] == CLEAN else []) + list(range(s, s + cfg.block_size - 1))
        assert torch.allclose(got, ref[want_rows], atol=ATOL), (got - ref[want_rows]).abs().max()
        seq.update(got)
        checked += 1
    assert checked >= 3 and seq.block_start > 0  # crossed at least one block boundary


def test_batched_rows_match_single(tiny: Transformer) -> None:
    cfg = tiny.config
    pa = prompt_of(cfg, list(range(10, 22)), [50, 51])
    pb = prompt_of(cfg, list(range(30, 37)), list(range(40, 49)))
    single = []
    for p in (pa, pb):
        s = Sequence(p, cfg.special, make_policy("one_per_step"), cfg.block_size, 4, True, row=0, max_len=512)
        (lg,) = execute(tiny, [s], [s.prepare()], [new_slot_attrs(512, 0)])
        single.append(lg)
    sa = Sequence(pa, cfg.special, make_policy("one_per_step"), cfg.block_size, 4, True, row=0, max_len=512)
    sb = Sequence(pb, cfg.special, make_policy("one_per_step"), cfg.block_size, 4, True, row=1, max_len=512)
    both = execute(tiny, [sa, sb], [sa.prepare(), sb.prepare()], [new_slot_attrs(512, 0), new_slot_attrs(512, 0)])
    for a, b in zip(both, single, strict=True):
        assert torch.allclose(a, b, atol=ATOL)


def test_row_runs_split_the_batch_into_consecutive_cache_rows() -> None:
    assert row_runs([0, 1, 2, 3]) == [(0, 4, 0)]
    assert row_runs([0, 1, 3, 4, 1]) == [(0, 2, 0), (2, 4, 3), (4, 5, 1)]
    assert row_runs([2, 0, 1, 0]) == [(0, 1, 2), (1, 3, 0), (3, 4, 0)]
    assert row_runs([5]) == [(0, 1, 5)]


def test_rows_in_any_order_and_packed_pieces_match_single(tiny: Transformer) -> None:
    """Sequences on cache rows 2, 0, 1 (in that batch order), the last one's long first feed
    cut into 16-token pieces: batch rows 2, 0, 1, 1, 1 (a run of consecutive cache rows, then
    pieces that repeat a row). Each one's logits equal its forward alone on row 0."""
    cfg = tiny.config
    prompts = [prompt_of(cfg, [10 + i % 40 for i in range(n)], [20 + i % 30 for i in range(m)])
               for n, m in ((5, 2), (4, 3), (30, 12))]
    policy = make_policy("one_per_step")
    single = []
    for p in prompts:
        s = Sequence(p, cfg.special, policy, cfg.block_size, 4, True, row=0, max_len=512)
        (lg,) = execute(tiny, [s], [s.prepare()], [new_slot_attrs(512, 0)])
        single.append(lg)
    seqs = [Sequence(p, cfg.special, policy, cfg.block_size, 4, True, row=r, max_len=512)
            for p, r in zip(prompts, (2, 0, 1), strict=True)]
    feeds = [q.prepare() for q in seqs]
    assert [len(f.ids) > 16 for f in feeds] == [False, False, True]
    tiny.setup_cache(4, 512)
    try:
        both = execute(tiny, seqs, feeds, [new_slot_attrs(512, 0) for _ in seqs], chunk=16)
    finally:
        tiny.setup_cache(2, 512)
    for a, b in zip(both, single, strict=True):
        assert a.shape == b.shape and torch.allclose(a, b, atol=ATOL)


def test_checkpoint_roundtrip_and_from_pretrained(tiny: Transformer, tmp_path: Path) -> None:
    save_checkpoint(tiny, tmp_path)
    native = load_checkpoint(tmp_path)
    from transformers import AutoModel

    from engine.model.hf import register

    register()
    hf = AutoModel.from_pretrained(tmp_path)
    x = torch.randint(8, tiny.config.vocab_size, (1, 9))
    pos = torch.arange(9)[None]
    k, b = torch.full_like(x, CLEAN), torch.full_like(x, -1)
    with torch.no_grad():
        ref = tiny(x, pos, layout_mask(k, pos, b, k, pos, b))
        assert torch.equal(native(x, pos, layout_mask(k, pos, b, k, pos, b)), ref)
        assert torch.allclose(hf(x), ref, atol=1e-6)


def test_multi_block_edit_pass_matches_uncached_forwards(tiny: Transformer) -> None:
    cfg = tiny.config
    b = cfg.block_size
    prompt = prompt_of(cfg, list(range(10, 26)), [40, 41])
    pol = make_policy("speedy", multi_block=True, edit_passes=2)
    seq = Sequence(prompt, cfg.special, pol, b, 3 * b, cfg.shift_logits, max_len=512)
    attrs = new_slot_attrs(512, 0)
    while seq.phase != "multi" and not seq.done():
        (lg,) = execute(tiny, [seq], [seq.prepare()], [attrs])
        seq.update(lg)
    assert seq.phase == "multi", "a three-block completion enters the multi-block edit phase"
    feed = seq.prepare()
    (got,) = execute(tiny, [seq], [feed], [attrs])
    mid = seq.middle.tolist()
    nb = -(-seq.live_limit() // b)
    rows = []
    for k in range(nb):
        s = seq.P + k * b
        ref = uncached_logits(tiny, [*prompt, *mid[: (k + 1) * b]], s)
        rows.append(ref[list(range(s, s + b - 1))] if k == 0 else ref[list(range(s - 1, s + b - 1))])
    want = torch.cat(rows, 0)
    assert torch.allclose(got, want, atol=ATOL), (got - want).abs().max()


def test_an_embedding_built_on_meta_skips_the_init_that_imports_dynamo() -> None:
    """The loaders build on the meta device and assign the weights: the table's random init
    there would only import torch._dynamo (1.3 s and ~140 MiB of every cold start:
    bench/step_work.py `cold_start`). Anywhere else the table is initialised as nn.Embedding."""
    import subprocess
    import sys

    code = ("import sys, torch\nfrom engine.model.native import embedding\n"
            "with torch.device('meta'):\n    e = embedding(64, 8)\n"
            "assert e.weight.is_meta and e.weight.shape == (64, 8) and e.weight.requires_grad\n"
            "print('torch._dynamo' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
    real = embedding(64, 8)
    assert not real.weight.is_meta and real.weight.std().item() > 0.5  # N(0, 1) as nn.Embedding's


def test_the_cpu_gemm_layout_keeps_the_embedded_models_values_and_its_logits_bit_for_bit(tmp_path: Path) -> None:
    """The product's load (`engine.model.loader.load_model`) lays tiny-code's float32 linear
    weights out as [in, out] (`cpu_gemm_layout`): same values and shapes, the tied head its own
    copy, the embedding's rows contiguous, the same logits to the bit for a decode step's rows
    and a prefill's, and a checkpoint saved from it equal to the stored one."""
    from engine.model.checkpoint import EMBEDDED_DIR
    from engine.model.loader import load_model

    stored = load_checkpoint(EMBEDDED_DIR)
    laid = load_model(str(EMBEDDED_DIR)).model
    assert isinstance(laid, Transformer)
    linears = [n for n, m in laid.named_modules() if isinstance(m, torch.nn.Linear)]
    assert "output" in linears and len(linears) == 2 * 2 * laid.config.n_layer + 1
    for name in linears:
        w, ref = laid.get_submodule(name).weight, stored.get_submodule(name).weight
        assert w.shape == ref.shape and torch.equal(w, ref)
        assert w.t().is_contiguous() and not w.is_contiguous(), name  # stored [in, out]
    assert laid.output.weight is not laid.tok_embeddings.weight and laid.tok_embeddings.weight.is_contiguous()
    for T in (16, 250):
        x = torch.randint(8, laid.config.vocab_size, (1, T), generator=torch.Generator().manual_seed(T))
        pos = torch.arange(T)[None]
        k, b = torch.full_like(x, CLEAN), torch.full_like(x, -1)
        mask = layout_mask(k, pos, b, k, pos, b)
        with torch.no_grad():
            assert torch.equal(laid(x, pos, mask), stored(x, pos, mask)), T
    save_checkpoint(laid, tmp_path)
    again = load_checkpoint(tmp_path)
    assert all(torch.equal(a, b) for a, b in zip(again.state_dict().values(), stored.state_dict().values(), strict=True))
