"""The published diffusion coders' files decide their prompt and their ends (issue 52, items 1-2):
Dream-v0-Instruct, Dream-Coder-Instruct and DiffuCoder-Instruct carry Qwen2.5's 22 added tokens,
FIM tokens included, yet were not trained with them, so they get their chat template; FIM only
where a file says the model was trained with it; every end id from every source, each named by
`llada-engine check`."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from engine.api import CompletionRequest, Plan
from engine.daemon.cli import main as engine_main
from engine.prompt.tokenizer import load_prompt_format, load_tokenizer
from engine.service import TextEngine
from tests.fakes import published as pub
from tests.fakes.real_ckpts import fixture

QWEN_DERIVED = ["dream-instruct", "dream-coder-instruct", "diffucoder-instruct"]
EMBEDDED = Path(__file__).resolve().parents[4] / "engine" / "checkpoints" / "tiny-code"


@pytest.mark.parametrize("name", QWEN_DERIVED)
def test_the_fixtures_carry_qwen25s_full_added_token_set(name: str) -> None:
    path = fixture(name)
    tok = load_tokenizer(path)
    added = {i: (t.content, t.special) for i, t in tok.get_added_tokens_decoder().items()}
    assert {i: added[i] for i in pub.QWEN25_ADDED} == pub.QWEN25_ADDED and len(pub.QWEN25_ADDED) == 22
    decoder = json.loads((path / "tokenizer_config.json").read_text())["added_tokens_decoder"]
    assert {int(i): (v["content"], v["special"]) for i, v in decoder.items()} == added


@pytest.mark.parametrize("name", QWEN_DERIVED)
def test_qwen_derived_instruct_checkpoints_get_their_chat_template_not_fim(name: str) -> None:
    eng = TextEngine(fixture(name), threads=1, max_len=2048, max_prompt_tokens=1200)
    assert eng.sp.fim_prefix == 151659  # the markers are there ...
    assert eng.format.kind == "chat" and not eng.fim  # ... but the checkpoint was not trained with them
    assert "Qwen2.5's" in eng.info()["prompt_reason"]
    ids, _suffix, _partial, _allowed = eng.layout("def f(x):\n    ret", "\n    return y\n", True)
    text = eng.tok.decode(ids, skip_special_tokens=False)
    assert text.startswith("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n")
    assert "<|fim_" not in text and "return y" in text  # the suffix is in the user turn, no FIM markers


def test_fim_when_a_file_says_the_model_was_trained_with_it(tmp_path: Path) -> None:
    """The model card showing a FIM prompt is evidence; the embedded model's own FIM tokens are;
    Qwen2.5's inherited tokens alone are not (a base checkpoint without a template: plain)."""
    base = tmp_path / "dream-base"
    shutil.copytree(fixture("dream-base"), base)
    tok = load_tokenizer(base)
    fmt = load_prompt_format(base, tok, True)
    assert fmt.kind == "plain" and "no FIM prompt in README.md" in fmt.reason
    (base / "README.md").write_text("Infilling:\n\n    <|fim_prefix|>{prefix}<|fim_suffix|>{suffix}<|fim_middle|>\n")
    fmt = load_prompt_format(base, tok, True)
    assert fmt.kind == "fim" and "model card" in fmt.reason
    emb = load_prompt_format(EMBEDDED, load_tokenizer(EMBEDDED), True)
    assert emb.kind == "fim" and "of its own" in emb.reason


def test_check_prints_the_format_its_reason_and_every_end_with_its_source(capsys: pytest.CaptureFixture[str]) -> None:
    assert engine_main(["check", str(fixture("diffucoder-instruct"))]) == 0
    out = capsys.readouterr().out
    assert "prompt       chat from" in out and "because    the checkpoint ships a chat template; no FIM" in out
    assert "decoding ends at [151643, 151645, 151667]" in out
    assert "151643: end of middle; config.json eos_token_id; generation_config.json eos_token_id; " \
           "tokenizer eos_token <|endoftext|>" in out
    assert "151645: chat template end of turn <|im_end|>" in out
    assert "151667: tokenizer pad_token <|dlm_pad|> (answers are padded with it)" in out


@pytest.mark.parametrize("end", ["<|dlm_pad|>", "<|im_end|>", "<|endoftext|>"])
def test_diffucoder_stops_at_each_of_its_end_markers(end: str) -> None:
    """It used to stop only at 151643: <|dlm_pad|> and <|im_end|> decoded on to the budget."""
    eng = TextEngine(fixture("diffucoder-instruct"), threads=1, max_len=1024, max_prompt_tokens=64)
    eid = eng.tok.token_to_id(end)
    assert eid in eng.stop_ids and set(eng.end_sources) == {151643, 151645, 151667}
    seq, _partial, _ = eng.prepare(CompletionRequest("r", "d", "x = ", "", Plan(max_tokens=32, preset="speedy")), 0)
    assert eid in seq.end_ids
    seq.middle[:] = eid
    seq.middle[0] = eng.tok.token_to_id("a")
    seq.committed[:] = True
    seq._find_end()
    assert seq.end == 1 and seq.reason == "end_of_middle"
