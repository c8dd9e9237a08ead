"""The trainer's step variants (engine/train/speed.py): grouped-query attention repeated or
native, eager or compiled. Each must compute the same losses and gradients; the picker times
them and keeps the fastest that runs. Timing on CUDA is the point (SDPA's math fallback for a
masked enable_gqa call); no GPU is lent here, so these run on the CPU, where the candidates
are forced."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from engine.model.checkpoint import EMBEDDED_DIR
from engine.model.native import GQA_MODES, Transformer, preset
from engine.prompt.tokenizer import load_tokenizer, special_tokens_of
from engine.train.data import MAX_POSITIONS, Batch, ExampleStream, attach_mask, make_batch
from engine.train.speed import candidates, pick, step_ms
from engine.train.train import losses

CPU = torch.device("cpu")


def _model_and_batch(batch: int = 3) -> tuple[Transformer, Batch]:
    tok = load_tokenizer(EMBEDDED_DIR)
    sp = special_tokens_of(tok)
    cfg = preset("test-tiny", vocab_size=tok.get_vocab_size(), block_size=16, max_seq_len=MAX_POSITIONS, special=sp)
    assert cfg.n_head != cfg.n_kv_head  # grouped-query heads: the two modes differ in how
    model = Transformer(cfg)
    model.init_weights(0)
    texts = [Path(torch.__file__).parent.joinpath(n).read_text() for n in ("functional.py", "serialization.py")]
    stream = ExampleStream(texts, [1.0, 1.0], tok, sp, cfg.block_size, seed=5)
    rows = [stream.next() for _ in range(batch)]
    b = attach_mask(make_batch(rows, sp, cfg.vocab_size, cfg.block_size, torch.Generator().manual_seed(1), True,
                               with_mask=False))
    return model, b


def _loss_and_grads(model: Transformer, b: Batch,
                    runner: torch.nn.Module | None = None) -> tuple[float, list[torch.Tensor]]:
    for p in model.parameters():
        p.grad = None
    loss = torch.stack(losses(runner if runner is not None else model, b)).sum()
    loss.backward()
    grads = [p.grad.detach().clone() for p in model.parameters() if p.grad is not None]
    return float(loss.detach()), grads


def test_gqa_modes_give_the_same_losses_and_gradients() -> None:
    model, b = _model_and_batch()
    out = {}
    for mode in GQA_MODES:
        model.set_gqa(mode)
        out[mode] = _loss_and_grads(model, b)
    (l0, g0), (l1, g1) = out["native"], out["expand"]
    assert l0 == pytest.approx(l1, rel=1e-5)
    assert len(g0) == len(g1) > 0
    for a, c in zip(g0, g1, strict=True):
        torch.testing.assert_close(a, c, rtol=1e-4, atol=1e-6)


def test_unknown_gqa_mode_is_refused() -> None:
    model, _ = _model_and_batch()
    with pytest.raises(ValueError, match="unknown GQA mode"):
        model.set_gqa("fast")


def test_auto_times_candidates_on_cuda_only() -> None:
    cuda = torch.device("cuda")
    assert candidates("auto", "auto", CPU) == (["native"], [False])
    assert candidates("auto", "auto", cuda) == (list(GQA_MODES), [False, True])
    assert candidates("expand", "off", cuda) == (["expand"], [False])
    assert candidates("native", "on", CPU) == (["native"], [True])


def test_pick_times_every_mode_and_sets_the_fastest() -> None:
    model, b = _model_and_batch()
    choice = pick(model, b, lambda m, x: torch.stack(losses(m, x)).sum(), CPU, False, list(GQA_MODES), [False],
                  reps=2)
    assert set(choice.ms) == set(GQA_MODES) and not choice.errors
    assert choice.ms[choice.gqa] == min(choice.ms.values())
    assert all(layer.attention.gqa == choice.gqa for layer in model.blocks())
    assert choice.runner is model and not choice.compiled
    assert all(p.grad is None for p in model.parameters())  # the timing leaves no gradients behind
    assert "gqa" in choice.describe()


def test_a_candidate_that_fails_is_reported_and_left_out() -> None:
    model, b = _model_and_batch()

    def loss_fn(m: torch.nn.Module, x) -> torch.Tensor:  # noqa: ANN001
        if model.blocks()[0].attention.gqa == "expand":
            raise RuntimeError("no kernel for this")
        return torch.stack(losses(m, x)).sum()

    choice = pick(model, b, loss_fn, CPU, False, list(GQA_MODES), [False], reps=1)
    assert choice.gqa == "native" and list(choice.ms) == ["native"]
    assert "no kernel for this" in choice.errors["expand"]
    assert all(layer.attention.gqa == "native" for layer in model.blocks())
    with pytest.raises(RuntimeError, match="no way to run"):
        pick(model, b, lambda m, x: (_ for _ in ()).throw(RuntimeError("nothing runs")), CPU, False,
             list(GQA_MODES), [False], reps=1)


def test_step_ms_is_positive_and_drops_gradients() -> None:
    model, b = _model_and_batch()
    ms = step_ms(model, b, lambda m, x: torch.stack(losses(m, x)).sum(), CPU, False, reps=1)
    assert ms > 0 and all(p.grad is None for p in model.parameters())


def test_compiled_step_matches_eager(tmp_path: Path) -> None:
    """torch.compile on the CPU (inductor, the machine's C++ compiler): the compiled runner's
    losses and gradients are the eager model's."""
    model, b = _model_and_batch(2)
    eager_loss, eager_grads = _loss_and_grads(model, b)
    choice = pick(model, b, lambda m, x: torch.stack(losses(m, x)).sum(), CPU, False, ["native"], [True], reps=1)
    if choice.errors:
        pytest.fail(f"compile failed here: {choice.errors}")
    assert choice.compiled and choice.runner is not model
    loss, grads = _loss_and_grads(model, b, choice.runner)
    assert loss == pytest.approx(eager_loss, rel=1e-4)
    for a, c in zip(eager_grads, grads, strict=True):
        torch.testing.assert_close(a, c, rtol=1e-3, atol=1e-5)


def test_only_the_fastest_eager_mode_is_compiled(monkeypatch: pytest.MonkeyPatch) -> None:
    """Compiling costs a minute or more on a device: `pick` compiles the best eager mode only.
    (torch.compile is replaced by the identity here: this checks the choice, the test above
    the compiled step.)"""
    compiled: list[torch.nn.Module] = []

    def fake_compile(m: torch.nn.Module, **_: object) -> torch.nn.Module:
        compiled.append(m)
        return m

    monkeypatch.setattr(torch, "compile", fake_compile)
    model, b = _model_and_batch()
    choice = pick(model, b, lambda m, x: torch.stack(losses(m, x)).sum(), CPU, False, list(GQA_MODES),
                  [False, True], reps=1)
    eager = {k: v for k, v in choice.ms.items() if "+" not in k}
    assert set(eager) == set(GQA_MODES) and len(compiled) == 1
    assert list(set(choice.ms) - set(eager)) == [f"{min(eager, key=eager.__getitem__)}+compile"]
