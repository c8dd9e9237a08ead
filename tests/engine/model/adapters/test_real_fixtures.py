"""Checkpoints that look like the real ones (tests/fakes/real_ckpts.py): padded vocabularies,
published configs, bf16 shards. Mid-word completions, end ids, base vs instruct, dtype, the
config allow-lists, the memory plan and `llada-engine check`."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from engine.api import CompletionRequest, Plan
from engine.daemon.cli import main as engine_main
from engine.model.adapters import find_family
from engine.model.loader import cpu_has_bf16_matmul, load_model
from engine.model.memory import AVAILABLE_ENV, MemoryPlanError, plan, stored_dtype
from engine.service import TextEngine
from tests.fakes import published as pub
from tests.fakes.real_ckpts import NAMES, _spec, config_of, fixture, published_diff

DTYPES = [torch.bfloat16, torch.float32]
FAMILY = {name: _spec(name)["family"] for name in NAMES}


def test_fixtures_differ_from_the_published_configs_in_depth_and_width_only() -> None:
    for name in NAMES:
        written = json.loads((fixture(name) / "config.json").read_text())
        diff = published_diff(name, written)
        print(f"{name}: " + ", ".join(f"{k} {a} -> {b}" for k, (a, b) in diff.items()))
        allowed = set(pub.DEPTH_WIDTH[FAMILY[name]])
        assert diff and set(diff) <= allowed, f"{name} differs beyond depth and width: {set(diff) - allowed}"


def test_the_listing_catches_a_changed_vocabulary() -> None:
    name = "dream-instruct"
    changed = config_of(name) | {"vocab_size": 1024}
    assert "vocab_size" in published_diff(name, changed)


@pytest.mark.parametrize("name", NAMES)
def test_fixture_has_a_padded_vocabulary_and_bf16_shards(name: str) -> None:
    path = fixture(name)
    spec = _spec(name)
    from engine.prompt.tokenizer import load_tokenizer

    rows = config_of(name).get("embedding_size") or config_of(name)["vocab_size"]
    assert load_tokenizer(path).get_vocab_size() == spec["tokens"] < rows
    index = json.loads((path / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) == 2
    assert stored_dtype(path) == "bfloat16"
    lm = load_model(path)
    assert lm.family == FAMILY[name]
    # auto: the checkpoint's bf16, computed in float32 on a CPU without bf16 matrix units (a fixture fits)
    assert next(lm.model.parameters()).dtype == (torch.bfloat16 if cpu_has_bf16_matmul() else torch.float32)
    assert lm.config.vocab_size == rows


@pytest.mark.parametrize("dtype", DTYPES, ids=["bf16", "f32"])
@pytest.mark.parametrize("name", NAMES)
def test_mid_word_completion_on_a_padded_vocabulary(name: str, dtype: torch.dtype) -> None:
    """Before the fix the healing mask had the tokenizer's width and every preset raised
    IndexError (mask [157153] vs logits [157184]) for the cursor after `ret`."""
    eng = TextEngine(fixture(name), threads=1, max_len=1024, max_prompt_tokens=64, dtype=dtype)
    assert eng.info()["dtype"] == str(dtype).removeprefix("torch.")
    with torch.no_grad():  # a confident random model: several tokens a forward (5-20 forwards, not 33-65)
        eng.model.output.weight.mul_(100.0)  # type: ignore[operator]
    ids, _suffix, partial, allowed = eng.layout("def f(x):\n    ret", "\n", True)
    assert partial == "ret" and allowed is not None and allowed.shape[0] == eng.config.vocab_size
    assert {eng.tok.id_to_token(i) for i in allowed.nonzero().flatten().tolist()} == {"ret", "return"}
    for preset in ("speedy", "quality"):
        evs = list(eng.complete(CompletionRequest("r", "d", "def f(x):\n    ret", "\n", Plan(max_tokens=8, preset=preset))))
        assert evs[-1].kind == "done", evs[-1]


@pytest.mark.parametrize("dtype", DTYPES, ids=["bf16", "f32"])
def test_decoding_stops_at_end_of_text_as_well_as_the_turn_end(dtype: torch.dtype) -> None:
    """LLaDA2 chat: <|role_end|> ends a turn, <|endoftext|> too; a middle whose first token is
    <|endoftext|> ends there (it used to decode on to the end of the budget)."""
    eng = TextEngine(fixture("llada2-mini"), threads=1, max_len=1024, max_prompt_tokens=64, dtype=dtype)
    eot, role_end = eng.tok.token_to_id("<|endoftext|>"), eng.tok.token_to_id("<|role_end|>")
    assert {eot, role_end} <= eng.stop_ids
    req = CompletionRequest("r", "d", "x = ", "", Plan(max_tokens=64, preset="speedy"))
    seq, _partial, _ = eng.prepare(req, 0)
    assert {eot, role_end} <= seq.end_ids
    seq.middle[:] = eot
    seq.middle[0] = eng.tok.token_to_id("a")
    seq.committed[:] = True
    seq._find_end()
    assert seq.end == 1 and seq.reason == "end_of_middle"


def test_base_or_instruct_comes_from_the_files_never_the_path(tmp_path: Path) -> None:
    inst = tmp_path / "data" / "base" / "my-llada2-base-sft-instruct"
    shutil.copytree(fixture("llada-8b-instruct"), inst)
    assert TextEngine(inst, threads=1, max_len=1024).format.kind == "chat"
    assert TextEngine(inst, threads=1, max_len=1024, prompt_format="plain").format.kind == "plain"
    base = tmp_path / "instruct-looking-name-Instruct"
    shutil.copytree(fixture("llada-8b-base"), base)
    assert TextEngine(base, threads=1, max_len=1024).format.kind == "plain"
    with pytest.raises(ValueError, match="no chat template"):
        TextEngine(base, threads=1, max_len=1024, prompt_format="chat")


@pytest.mark.parametrize("cfg", [pub.LLADA2_MINI, pub.LLADA_8B, pub.DREAM_7B], ids=["llada2", "llada", "dream"])
def test_allow_lists_accept_the_published_configs_and_refuse_an_unknown_key(cfg: dict) -> None:
    fam = find_family(cfg)
    assert fam is not None
    fam.config_check(cfg)
    with pytest.raises(ValueError, match="made_up_routing"):
        fam.config_check(cfg | {"made_up_routing": 1})


def test_llada2_2_block_routing_is_read_and_a_bad_capacity_refused_by_name(tmp_path: Path) -> None:
    """LLaDA2.2's keys on the padded LLaDA2 fixture: a valid block routing loads and checks; a
    capacity below top-k is refused by name, by the loader and by `check`."""
    path = tmp_path / "llada2.2"
    shutil.copytree(fixture("llada2-mini"), path)
    cfg = json.loads((path / "config.json").read_text())
    k, e = cfg["num_experts_per_tok"], cfg["num_experts"]
    (path / "config.json").write_text(json.dumps(cfg | {"expert_capacity": (k + e) // 2, "block_size": 32}))
    assert load_model(path).model.args.expert_capacity == (k + e) // 2
    assert engine_main(["check", str(path)]) == 0
    (path / "config.json").write_text(json.dumps(cfg | {"expert_capacity": k - 1, "block_size": 32}))
    with pytest.raises(ValueError, match="expert_capacity"):
        load_model(path)
    assert engine_main(["check", str(path)]) == 2


def test_an_ignored_key_with_a_value_that_matters_is_refused() -> None:
    with pytest.raises(ValueError, match="use_sliding_window=True"):
        find_family(pub.DREAM_7B).config_check(pub.DREAM_7B | {"use_sliding_window": True})  # type: ignore[union-attr]


@pytest.mark.parametrize("name", NAMES)
def test_check_prints_the_plan_without_loading(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert engine_main(["check", str(fixture(name))]) == 0
    out = capsys.readouterr().out
    spec = _spec(name)
    rows = config_of(name).get("embedding_size") or config_of(name)["vocab_size"]
    assert f"tokenizer {spec['tokens']} tokens, embedding {rows} rows" in out
    assert f"family       {FAMILY[name]}" in out and "fits" in out
    # auto: the stored bf16, or float32 on a CPU without bf16 matrix units (a tiny fixture fits), saying why
    if cpu_has_bf16_matmul():
        assert "dtype        bfloat16 on cpu (stored: bfloat16)" in out
    else:
        assert "dtype        float32 on cpu (stored: bfloat16)\n  because    this CPU has no bf16 matrix units" in out
    assert ("prompt       chat" in out) == (spec["template"] is not None)


def test_plan_counts_the_weights_and_cache_exactly() -> None:
    path = fixture("llada2-mini")
    cfg = config_of("llada2-mini")
    lm = load_model(path, dtype=torch.float32)
    n = sum(p.numel() for p in lm.model.parameters() if p.is_floating_point())
    n += sum(b.numel() for name, b in lm.model.named_buffers() if name.endswith("expert_bias"))
    p32, p16 = plan(path, cfg, "float32", "cpu", 100, 1 << 40), plan(path, cfg, "bfloat16", "cpu", 100, 1 << 40)
    assert p32.params == n
    assert p32.weight_bytes == 2 * p16.weight_bytes == 4 * n
    assert p16.kv_bytes_per_token == 2 * cfg["num_hidden_layers"] * cfg["num_key_value_heads"] * cfg["head_dim"] * 2


def test_a_plan_that_does_not_fit_is_refused_with_what_would(monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    path = fixture("llada-8b-instruct")
    p16 = plan(path, config_of("llada-8b-instruct"), "bfloat16", "cpu", 4096, 1 << 40)
    monkeypatch.setenv(AVAILABLE_ENV, str(int(p16.total * 1.3)))  # bf16 fits, float32 does not
    with pytest.raises(MemoryPlanError, match="--dtype bfloat16"):
        load_model(path, dtype=torch.float32)
    assert load_model(path).family == "llada"  # the default (the checkpoint's bf16) fits
    assert engine_main(["check", str(path), "--dtype", "float32"]) == 3
    assert "DOES NOT FIT" in capsys.readouterr().out


def test_check_says_when_and_why_auto_computes_a_bf16_checkpoint_in_float32(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """On a CPU without bf16 matrix units, `auto` computes the stored bf16 in float32 when that
    needs at most half the free memory (--available-gib plans for that much), and says so."""
    from engine.model import loader
    from engine.service import REAL_MAX_LEN

    path = fixture("llada-8b-instruct")
    monkeypatch.setattr(loader, "cpu_has_bf16_matmul", lambda: False)
    need = plan(path, config_of("llada-8b-instruct"), "float32", "cpu", REAL_MAX_LEN, 1 << 40).total
    for gib, dtype, why in ((need * 2.1 / (1 << 30), "float32", "float32 needs at most half the free memory"),
                            (need * 1.9 / (1 << 30), "bfloat16", "float32 would need more than half the free memory")):
        assert engine_main(["check", str(path), "--available-gib", f"{gib:.6f}"]) == 0
        out = capsys.readouterr().out
        assert f"dtype        {dtype} on cpu (stored: bfloat16)" in out and why in out, out
        assert f"at {dtype} " in out  # the memory plan is made for the dtype chosen


def test_multi_block_presets_reach_the_multi_block_passes() -> None:
    """speedy_multi / quality_multi turn on the multi-block edit passes (speedy does not)."""
    from engine.decoding.policies import make_policy

    eng = TextEngine(threads=1)  # the embedded model: block-causal, exact cache
    req = CompletionRequest("m", "d", "def add(a, b):\n    ", "", Plan(max_tokens=64, preset="speedy"))
    for preset, want in (("speedy", False), ("speedy_multi", True), ("quality_multi", True)):
        seq, _partial, _ = eng.prepare(req, 0, make_policy(preset))
        phases = set()
        from engine.decoding.batch import execute, new_slot_attrs

        attrs = new_slot_attrs(eng.max_len, 0)
        while seq.phase != "done":
            (lg,) = execute(eng.model, [seq], [seq.prepare()], [attrs])  # type: ignore[arg-type]
            seq.update(lg)
            phases.add(seq.phase)
        assert ("multi" in phases) == want, (preset, phases, seq.end)


def test_dtype_and_prompt_format_options_reach_the_in_process_engine() -> None:
    """The LSP options `dtype` / `promptFormat` (machine-scoped) become TextEngine's arguments."""
    import asyncio

    from llada_lsp.engines.engine_client import make_engine
    from llada_lsp.options import MACHINE_SCOPED, OptionsError, parse_options

    opts, _ = parse_options({"dtype": "bfloat16", "promptFormat": "plain"})
    assert (opts.dtype, opts.prompt_format) == ("bfloat16", "plain") and {"dtype", "prompt_format"} <= MACHINE_SCOPED
    for bad in ({"dtype": "float64"}, {"promptFormat": "base"}):
        with pytest.raises(OptionsError):
            parse_options(bad)
    seen: dict = {}

    def factory(model_dir: str | None, **kw: object) -> object:
        seen.update(kw)
        return TextEngine(fixture("llada-8b-instruct"), threads=1, max_len=1024, **kw)  # type: ignore[arg-type]

    eng = make_engine("inprocess", model_dir=None, mode="speedy", device="cpu", dtype=opts.dtype,
                      prompt_format=opts.prompt_format)
    eng._factory = factory  # type: ignore[attr-defined]
    asyncio.run(eng.start(lambda msg, pct: None))
    try:
        assert seen["dtype"] == torch.bfloat16 and seen["prompt_format"] == "plain"
        assert eng.info["dtype"] == "bfloat16" and eng.info["prompt_format"] == "plain"
    finally:
        asyncio.run(eng.close())


def test_daemon_flags() -> None:
    from engine.daemon.cli import build_parser

    a = build_parser().parse_args(["serve", "--dtype", "bfloat16", "--prompt-format", "plain"])
    assert (a.dtype, a.prompt_format) == ("bfloat16", "plain")


def test_healing_has_the_models_width_and_never_offers_a_padding_row() -> None:
    from engine.prompt.healing import Healing

    texts = ["a", "ab", "abc", "b", "<|endoftext|>"]
    h = Healing(texts, {4}, rows=8)
    got = h.allowed("a")
    assert got is not None and got.shape == (8,) and got.nonzero().flatten().tolist() == [0, 1, 2]
    assert Healing(texts, {4}).allowed("a").shape == (5,)  # type: ignore[union-attr]
    with pytest.raises(ValueError, match="output rows"):
        Healing(texts, {4}, rows=3)
