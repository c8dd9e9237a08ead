"""Certainty-forcing self-distillation: the teacher's rows, their batches and the trainer's term.

The teacher is the embedded model decoding real infill prompts (cut from this project's own
source) on the CPU; batching several prompts over the KV cache must give what each prompt
decodes alone.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from engine.decoding.decode import Sequence
from engine.decoding.loops import DEFAULT_REPEATS
from engine.decoding.policies import make_policy
from engine.model.checkpoint import EMBEDDED_DIR, load_checkpoint
from engine.model.native import Transformer
from engine.prompt.tokenizer import load_tokenizer, special_tokens_of
from engine.train.batches import TeacherRows
from engine.train.data import Encoded, ExampleStream, make_batch
from engine.train.distill import adds_parse_error, load_rows, save_rows, teacher_row, teacher_rows
from engine.train.train import losses
from tests.engine.conftest import steps_alone
from tests.engine.train.test_train import TEXTS, _train

MAX_NEW = 40


@pytest.fixture(scope="module")
def model() -> Transformer:
    torch.manual_seed(0)
    return load_checkpoint(EMBEDDED_DIR).eval()


@pytest.fixture(scope="module")
def rows(model: Transformer) -> list[Encoded]:
    tok = load_tokenizer(EMBEDDED_DIR)
    stream = ExampleStream(TEXTS, [1.0] * len(TEXTS), tok, special_tokens_of(tok), model.config.block_size, seed=3)
    out, st = teacher_rows(model, stream, 4, batch=3, max_new=MAX_NEW, progress=False)
    assert st.kept == 4 and st.decoded == st.kept + st.no_end + st.empty and st.forwards > 0
    return out


def _alone(model: Transformer, prompt: list[int]) -> tuple[list[int], str | None]:
    sp = model.config.special
    assert sp is not None
    model.setup_cache(1, model.config.max_seq_len)
    seq = Sequence(prompt, sp, make_policy("one_per_step"), model.config.block_size, MAX_NEW,
                   model.config.shift_logits, max_len=model.config.max_seq_len)
    seq.loop_repeats = DEFAULT_REPEATS
    for _ in steps_alone(model, seq):
        pass
    return seq.final_middle(), seq.reason


def test_batched_teacher_rows_are_what_each_prompt_decodes_alone(model: Transformer, rows: list[Encoded]) -> None:
    sp = model.config.special
    assert sp is not None
    b = model.config.block_size
    for r in rows:
        mid = r.ids[r.prompt_len:]
        assert r.middle_len == len(mid) and r.middle_len % b == 0
        end = mid.index(sp.end_of_middle)
        assert end > 0 and set(mid[end:]) == {sp.end_of_middle}  # ended, then padding
        alone, reason = _alone(model, r.ids[: r.prompt_len])
        assert reason == "end_of_middle"
        assert alone == mid[:end]


def test_teacher_row_pads_to_whole_blocks() -> None:
    r = teacher_row([1, 2, 3], [7] * 16, eom=5, block=16)
    assert r.prompt_len == 3 and r.middle_len == 32 and r.ids[3:19] == [7] * 16 and r.ids[19:] == [5] * 16
    assert teacher_row([1], [7] * 15, eom=5, block=16).middle_len == 16


def test_rows_survive_a_file_and_come_out_in_a_resumable_order(rows: list[Encoded], tmp_path: Path) -> None:
    save_rows(tmp_path / "t.pt", rows, {"teacher": "embedded"})
    back = load_rows(tmp_path / "t.pt")
    assert [(r.ids, r.prompt_len, r.middle_len) for r in back] == [(r.ids, r.prompt_len, r.middle_len) for r in rows]
    a = TeacherRows(back, seed=1)
    first = a.next(6)  # more than one epoch
    assert all(r.teacher for r in first) and not any(r.teacher for r in back)
    assert sorted(x.ids for x in first[:4]) == sorted(x.ids for x in back)  # an epoch: each row once
    later = a.next(3)
    b = TeacherRows(back, seed=1)
    b.pos = 6
    assert [r.ids for r in b.next(3)] == [r.ids for r in later]


def test_the_certainty_term_reads_only_masked_teacher_targets(model: Transformer, rows: list[Encoded]) -> None:
    sp = model.config.special
    assert sp is not None
    V, b = model.config.vocab_size, model.config.block_size
    plain = rows[1]
    taught = TeacherRows([rows[0]], seed=0).next(1)[0]
    batch = make_batch([taught, plain], sp, V, b, torch.Generator().manual_seed(0), diffusion=True, min_t=0.9)
    assert batch.certain is not None
    assert not bool(batch.certain[1].any())  # a real-data row
    T = batch.n_clean
    noisy = batch.idx[0, T: T + taught.middle_len]
    # shifted logits: noisy position j predicts token j + 1 of its block
    for s in range(0, taught.middle_len, b):
        want = noisy[s + 1: s + b] == sp.mask
        assert torch.equal(batch.certain[0, s: s + b - 1], want)
        assert not bool(batch.certain[0, s + b - 1])
    assert bool(batch.certain[0].any())
    with torch.no_grad():
        _, _, cert = losses(model, batch)
        assert float(cert) > 0
        none = make_batch([plain], sp, V, b, torch.Generator().manual_seed(0), diffusion=True)
        assert none.certain is None and float(losses(model, none)[2]) == 0.0


def test_train_mixes_teacher_rows_and_logs_the_certainty_term(rows: list[Encoded], tmp_path: Path) -> None:
    save_rows(tmp_path / "teacher.pt", rows, {})
    out = tmp_path / "run"
    # the embedded model gets some masked teacher tokens right (a random one would not)
    r = _train(out, "--steps", "2", "--preset", "tiny-code", "--init-from", str(EMBEDDED_DIR),
               "--distill", str(tmp_path / "teacher.pt"), "--distill-frac", "0.5")
    assert r.returncode == 0, r.stderr[-2000:]
    log = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    assert [rec["step"] for rec in log] == [1, 2]
    assert log[1]["diff"] > 0 and log[1]["cert"] > 0  # the second step is block diffusion
    assert log[0]["cert"] == 0.0  # the autoregressive step has no noisy copies
    state = torch.load(out / "state.pt", weights_only=False)
    assert state["teacher_pos"] == 2  # one teacher row of two a step


def test_teacher_blocks_can_be_masked_as_a_left_to_right_decode_leaves_them(model: Transformer,
                                                                           rows: list[Encoded]) -> None:
    sp = model.config.special
    assert sp is not None
    b = model.config.block_size
    taught = TeacherRows(rows, seed=0).next(4)
    batch = make_batch(taught, sp, model.config.vocab_size, b, torch.Generator().manual_seed(1),
                       diffusion=True, teacher_suffix=1.0)
    T = batch.n_clean
    starts = set()
    for i, r in enumerate(taught):
        noisy = batch.idx[i, T: T + r.middle_len] == sp.mask
        for s in range(0, r.middle_len, b):
            m = noisy[s: s + b].tolist()
            k = m.index(True)  # every block keeps at least one masked token
            assert all(m[k:]), m  # known start, masked rest
            starts.add(k)
    assert len(starts) > 1  # the known start varies


def test_the_parse_filter_drops_a_middle_that_breaks_the_code_and_keeps_one_that_fits() -> None:
    """Rows built as the trainer's layout from real text: a middle that completes the line
    adds no parse error, one that opens a bracket it never closes does; a prompt whose cut
    edge already fails to parse does not count against its middle."""
    tok = load_tokenizer(EMBEDDED_DIR)
    sp = special_tokens_of(tok)

    def row(prefix: str, middle: str, suffix: str) -> Encoded:
        prompt = [sp.fim_suffix, *tok.encode(suffix).ids, sp.fim_prefix, *tok.encode(prefix).ids, sp.fim_middle]
        return teacher_row(prompt, tok.encode(middle).ids, sp.end_of_middle, 16)

    def bad(r: Encoded) -> bool:
        return adds_parse_error(r, tok, sp.fim_prefix, sp.end_of_middle)

    pre, suf = "def area(w, h):\n    return ", "\n\nprint(area(2, 3))\n"
    assert not bad(row(pre, "w * h", suf))
    assert bad(row(pre, "max(w, (h", suf))
    cut = "ght)\n    x = [1, 2"  # a prefix cut mid-expression, as the trainer's prompts are
    assert not bad(row(cut, ", 3]", "\n    return x\n"))
