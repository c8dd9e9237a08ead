"""The training recipe on the CPU: the example workers, and the CLI's save / resume contract.

A GPU run uses the same code with `--device cuda`; no GPU is lent here, so only the CPU path
runs in these tests.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from engine.model.checkpoint import EMBEDDED_DIR, load_checkpoint
from engine.prompt.tokenizer import load_tokenizer, special_tokens_of
from engine.train.data import Encoded, ExampleStream
from engine.train.parallel import ParallelStream

ROOT = Path(__file__).resolve().parents[3]
TEXTS = [(ROOT / "engine" / name).read_text() for name in ("decoding/decode.py", "decoding/scheduler.py", "service.py")]


def _batches(seed: int, workers: int, n: int, start: int = 0) -> list[list[Encoded]]:
    tok = load_tokenizer(EMBEDDED_DIR)
    ps = ParallelStream(TEXTS, [1.0] * len(TEXTS), tok, special_tokens_of(tok), 16, seed=seed,
                        batch=3, workers=workers, start_step=start)
    try:
        return [ps.next_batch() for _ in range(n)]
    finally:
        ps.close()


def test_parallel_stream_is_deterministic_per_worker_count() -> None:
    a = _batches(seed=5, workers=2, n=4)
    b = _batches(seed=5, workers=2, n=4)
    assert [[r.ids for r in batch] for batch in a] == [[r.ids for r in batch] for batch in b]
    assert all(len(batch) == 3 for batch in a)
    # the two workers and another seed give other examples
    assert [r.ids for r in a[0]] != [r.ids for r in a[1]]
    c = _batches(seed=6, workers=2, n=1)
    assert [r.ids for r in c[0]] != [r.ids for r in a[0]]
    # the rows are what the single-process stream makes: ids with a middle of whole blocks
    tok = load_tokenizer(EMBEDDED_DIR)
    one = ExampleStream(TEXTS, [1.0] * len(TEXTS), tok, special_tokens_of(tok), 16, seed=1).next()
    for row in (*a[0], one):
        assert row.middle_len > 0 and row.middle_len % 16 == 0 and len(row.ids) > row.middle_len


def test_parallel_stream_rejects_no_workers() -> None:
    with pytest.raises(ValueError):
        ParallelStream(TEXTS, [1.0] * len(TEXTS), None, None, 16, seed=0, batch=1, workers=0)


def _args(out: Path, *extra: str) -> list[str]:
    return ["--out", str(out), "--tokenizer", str(EMBEDDED_DIR), "--preset", "test-tiny", "--batch", "2",
            "--ar-steps", "1", "--warmup", "1", "--save-every", "2", "--eval-every", "2", "--threads", "1", *extra]


def _train(out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "engine.train.train", *_args(out, *extra)]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


def _refused(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], out: Path, *extra: str) -> str:
    """The trainer's command line refused in this process (what a refused `_train` run does
    before it reads a file or builds a model, without a fresh interpreter's imports): exit code
    2, its stderr."""
    from engine.train import train

    monkeypatch.setattr(sys, "argv", ["engine.train.train", *_args(out, *extra)])
    with pytest.raises(SystemExit) as e:
        train.main()
    assert e.value.code == 2
    assert not out.exists()  # refused before it wrote anything
    return capsys.readouterr().err


@pytest.fixture(scope="module")
def two_steps(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """The default run of two steps (one autoregressive, one block-diffusion), run once for the
    tests that start from it; a test that goes on from it copies the run first."""
    out = tmp_path_factory.mktemp("two-steps") / "run"
    r = _train(out, "--steps", "2")
    assert r.returncode == 0, r.stderr[-2000:]
    return out, r


def test_train_saves_and_resumes(two_steps: tuple[Path, subprocess.CompletedProcess[str]], tmp_path: Path) -> None:
    """Two steps (one autoregressive, one block-diffusion), then a resume to four with two
    example workers: the log continues, the checkpoint loads and the held-out loss is logged."""
    out = tmp_path / "run"
    shutil.copytree(two_steps[0], out)
    r = _train(out, "--steps", "4", "--resume", "--data-workers", "2")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "resumed at step 2" in r.stdout
    log = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    assert [rec["step"] for rec in log] == [1, 2, 3, 4]
    assert log[0]["diff"] == 0.0 and log[1]["diff"] > 0  # the AR warm-up, then diffusion
    assert "held_ar" in log[1] and "held_ar" in log[3]
    assert log[-1]["tokens"] > log[1]["tokens"] > 0
    model = load_checkpoint(out / "latest")
    assert model.config.n_layer >= 1 and (out / "snap-000004" / "tokenizer.json").exists()


def test_train_with_a_chosen_step_variant_trains_as_eager_native_does(
        two_steps: tuple[Path, subprocess.CompletedProcess[str]], tmp_path: Path) -> None:
    """--gqa expand --compile on (what `auto` may pick on a GPU): the trainer times the variant
    on a batch of its held-out rows, says what it runs, and trains to the same losses as the
    default (eager, native GQA) from the same seed."""
    (base, r), var = two_steps, tmp_path / "var"
    assert "step: gqa" not in r.stdout  # nothing to choose on the CPU by default: no timing
    r = _train(var, "--steps", "2", "--gqa", "expand", "--compile", "on")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "step: gqa expand, compiled True (expand+compile" in r.stdout
    a, b = ([json.loads(line) for line in (d / "log.jsonl").read_text().splitlines()] for d in (base, var))
    for x, y in zip(a, b, strict=True):
        assert x["tokens"] == y["tokens"]
        assert x["ar"] == pytest.approx(y["ar"], rel=1e-3) and x["diff"] == pytest.approx(y["diff"], rel=1e-3)


def test_profile_steps_prints_the_time_by_operator_and_training_goes_on(tmp_path: Path) -> None:
    r = _train(tmp_path / "p", "--steps", "3", "--profile-steps", "2")
    short = _train(tmp_path / "s", "--steps", "1", "--profile-steps", "4")  # ends before the profile would
    assert short.returncode == 0 and "profile of steps 1-1" in short.stdout, short.stderr[-2000:]
    assert r.returncode == 0, r.stderr[-2000:]
    out = r.stdout
    assert "profile of steps 1-2" in out and "aten::mm" in out and "Self CPU" in out
    assert out.count("profile of steps") == 1  # once, after the profiled steps
    log = [json.loads(line) for line in (tmp_path / "p" / "log.jsonl").read_text().splitlines()]
    assert [rec["step"] for rec in log] == [1, 2, 3]


def test_train_with_echo_logs_fresh_tokens_and_echoed_steps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    r = _train(out, "--steps", "4", "--echo", "2", "--data-workers", "1", "--transport", "arrays")
    assert r.returncode == 0, r.stderr[-2000:]
    log = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    # step 1 is the warm-up; steps 2-3 share a batch, step 4 starts the next
    assert [rec["echoed"] for rec in log] == [0, 0, 1, 1]
    # an echoed step trains the diffusion loss only: no next-token loss, no new tokens
    assert log[2]["ar"] == 0.0 and log[2]["tokens"] == log[1]["tokens"] < log[3]["tokens"]
    assert all(rec["diff"] > 0 for rec in log[1:])
    assert "--echo" in _refused(monkeypatch, capsys, tmp_path / "bad", "--steps", "1", "--echo", "0")


def test_train_refuses_bf16_without_native_support(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    from engine.model import loader

    # a CPU without bf16 matrix units, whatever this one has (an AMX machine runs the test too)
    monkeypatch.setattr(loader, "cpu_has_bf16_matmul", lambda: False)
    assert "AMX" in _refused(monkeypatch, capsys, tmp_path / "x", "--steps", "1", "--bf16")


def test_wsd_schedule_holds_the_peak_then_decays_to_zero() -> None:
    from engine.train.train import lr_at

    lrs = [lr_at(s, 100, 1e-3, 10, "wsd", 20) for s in range(100)]
    assert lrs[0] == pytest.approx(1e-4) and lrs[9] == pytest.approx(1e-3)  # linear warm-up
    assert all(lr == 1e-3 for lr in lrs[10:80])  # stable
    decay = lrs[80:]
    assert all(a > b for a, b in zip(decay, decay[1:], strict=False)) and decay[-1] == pytest.approx(0.0)
    cos = [lr_at(s, 100, 1e-3, 10) for s in range(100)]  # the default: cosine to 10% of the peak
    assert cos[10] > cos[50] > cos[99] >= 1e-4 - 1e-12 and cos[99] == pytest.approx(1e-4, rel=0.01)


def test_wsd_run_keeps_its_stable_state_and_a_later_run_goes_on_from_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A wsd run saves its un-annealed state where the decay starts; another run (another
    directory) goes on from it with a longer schedule: step count, tokens and the peak rate."""
    first, second = tmp_path / "a", tmp_path / "b"
    r = _train(first, "--steps", "4", "--schedule", "wsd", "--decay-steps", "2", "--save-every", "100")
    assert r.returncode == 0, r.stderr[-2000:]
    assert (first / "state-stable.pt").exists() and load_checkpoint(first / "stable").config.n_layer >= 1
    log_a = [json.loads(line) for line in (first / "log.jsonl").read_text().splitlines()]
    assert log_a[-1]["lr"] < log_a[1]["lr"]  # the decay ran
    r = _train(second, "--steps", "6", "--schedule", "wsd", "--decay-steps", "2",
               "--resume-from", str(first / "state-stable.pt"))
    assert r.returncode == 0, r.stderr[-2000:]
    assert "resumed at step 2" in r.stdout
    log_b = [json.loads(line) for line in (second / "log.jsonl").read_text().splitlines()]
    assert [rec["step"] for rec in log_b] == [3, 4, 5, 6]
    assert log_b[0]["tokens"] > log_a[1]["tokens"]
    assert log_b[0]["lr"] == log_b[1]["lr"] == pytest.approx(1.5e-3)  # the peak again, no warm-up
    assert "--decay-steps" in _refused(monkeypatch, capsys, tmp_path / "c", "--steps", "2", "--schedule", "wsd")


def test_time_budget_sizes_the_decay_from_the_measured_rate(tmp_path: Path) -> None:
    """--time-budget-s: the stable phase runs until the budget's stable share has passed,
    then the state is kept and a decay of the steps that fit the rest runs to zero."""
    out = tmp_path / "t"
    r = _train(out, "--steps", "1000", "--schedule", "wsd", "--time-budget-s", "6", "--decay-frac", "0.5",
               "--save-every", "1000", "--eval-every", "1000")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "decay from step" in r.stdout and (out / "state-stable.pt").exists()
    log = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    lrs = [rec["lr"] for rec in log]
    assert len(log) < 1000  # the budget, not the step cap, ended it
    peak = [i for i, lr in enumerate(lrs) if lr == pytest.approx(1.5e-3)]
    assert peak and peak[-1] < len(lrs) - 1  # the peak, then the decay
    assert all(a > b for a, b in zip(lrs[peak[-1]:], lrs[peak[-1] + 1:], strict=False))
    assert lrs[-1] < 0.5 * 1.5e-3 and "held_ar" in log[-1]


def test_grown_layers_compute_what_the_trained_model_computes() -> None:
    """Depth growth: each trained layer first, repeats with zeroed output projections; the
    deeper model's logits equal the trained one's, and training can move the new layers."""
    import torch

    from engine.model.native import Transformer, preset
    from engine.train.grow import grown_state, layer_sources

    assert layer_sources(6, 9) == [0, 0, 1, 2, 2, 3, 4, 4, 5]
    with pytest.raises(ValueError):
        layer_sources(4, 3)
    small = Transformer(preset("test-tiny"))
    small.init_weights(3)
    big = Transformer(preset("test-tiny", n_layer=5))
    big.load_state_dict(grown_state(small.state_dict(), 2, 5))
    idx = torch.randint(0, 64, (2, 11))
    pos = torch.arange(11)[None].expand(2, 11)
    with torch.no_grad():
        assert torch.equal(small(idx, pos), big(idx, pos))
    new = big.blocks()[1]  # a repeat of trained layer 0
    assert not new.attention.wo.weight.any() and new.attention.wqkv.weight.any()
    big(idx, pos).logsumexp(-1).sum().backward()
    assert new.attention.wo.weight.grad is not None and new.attention.wo.weight.grad.any()
