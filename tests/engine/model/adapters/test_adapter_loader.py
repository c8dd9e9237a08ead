"""engine.model.loader: offline resolution (directory, local HF cache), the clear error for a
missing model, the trust_remote_code opt-in, special ids, lazy typed loading."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from engine.model import loader
from engine.model.checkpoint import save_checkpoint
from engine.model.loader import ModelNotFoundError, load_model, resolve, resolve_dtype, special_ids
from engine.model.native import Transformer, preset
from tests.engine.conftest import decode_alone
from tests.engine.model.adapters.tiny_ckpts import EOS, MASK, write_dream, write_llada2


def test_missing_hf_name_names_what_to_download() -> None:
    name = "llada-lsp-tests/not-in-any-cache"
    with pytest.raises(ModelNotFoundError) as e:
        load_model(name)
    msg = str(e.value)
    assert name in msg and f"hf download {name}" in msg and "never downloaded" in msg


def test_directory_without_config_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(ModelNotFoundError, match="config.json"):
        resolve(tmp_path)


def test_resolves_a_name_from_the_local_hf_cache_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from huggingface_hub import constants

    repo = tmp_path / "hub" / "models--someorg--tiny-dream"
    snap = repo / "snapshots" / ("0" * 40)
    write_dream(snap)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0" * 40)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    lm = load_model("someorg/tiny-dream")
    assert lm.path == snap and lm.family == "dream"
    import os

    assert os.environ.get("HF_HUB_OFFLINE") == "1"


def test_unknown_architecture_needs_the_explicit_opt_in(tmp_path: Path) -> None:
    d = write_dream(tmp_path / "other")
    cfg = json.loads((d / "config.json").read_text())
    cfg["model_type"], cfg["architectures"] = "mystery_dlm", ["MysteryModel"]
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="--trust-remote-code"):
        load_model(d)


def test_special_ids_come_from_config_or_tokenizer(tmp_path: Path) -> None:
    d = write_llada2(tmp_path / "l2", shards=1)
    cfg = json.loads((d / "config.json").read_text())
    sp = special_ids(d, cfg)
    assert (sp.mask, sp.end_of_text) == (MASK, EOS)  # mask from tokenizer_config, eos from the tokenizer
    assert special_ids(d, cfg, mask_id=7).mask == 7
    (d / "tokenizer_config.json").write_text("{}")
    (d / "tokenizer.json").write_text(json.dumps({"added_tokens": []}))
    with pytest.raises(ValueError, match="mask"):
        special_ids(d, cfg)


def test_loads_in_the_requested_dtype_without_meta_leftovers(tmp_path: Path) -> None:
    lm = load_model(write_llada2(tmp_path / "l2"), dtype=torch.bfloat16)
    tensors = [*lm.model.parameters(), *lm.model.buffers()]
    assert all(not t.is_meta for t in tensors)
    assert all(p.dtype == torch.bfloat16 for p in lm.model.parameters())


def test_missing_tensor_is_an_error(tmp_path: Path) -> None:
    from safetensors.torch import load_file, save_file

    d = write_dream(tmp_path / "d")
    state = load_file(str(d / "model.safetensors"))
    del state["model.layers.1.mlp.up_proj.weight"]
    save_file(state, str(d / "model.safetensors"))
    with pytest.raises(ValueError, match="up_proj"):
        load_model(d)


def test_embedded_checkpoint_loads_through_the_same_door(tmp_path: Path) -> None:
    m = Transformer(preset("test-tiny"))
    m.init_weights(0)
    save_checkpoint(m, tmp_path / "emb")
    lm = load_model(tmp_path / "emb")
    assert lm.family == "embedded" and lm.cache == "exact" and lm.special == m.config.special
    shutil.rmtree(tmp_path / "emb")


def test_remote_code_wrapper_decodes_uncached() -> None:
    """The opt-in path's wrapper: no KV cache, so every step is a full forward."""
    from types import SimpleNamespace

    from engine.decoding.decode_bidir import BidirSequence, make_sequence
    from engine.decoding.policies import make_policy
    from engine.model.loader import RemoteCodeModel
    from engine.model.native import ModelConfig, SpecialTokens

    class Fake(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = torch.nn.Embedding(32, 8)
            self.head = torch.nn.Linear(8, 32)

        def get_output_embeddings(self) -> torch.nn.Module:
            return self.head

        def forward(self, input_ids: torch.Tensor) -> SimpleNamespace:
            h = self.emb(input_ids)
            return SimpleNamespace(logits=self.head(h + h.mean(1, keepdim=True)))

    sp = SpecialTokens(mask=30, end_of_text=31, end_of_middle=31, pad=31, fim_prefix=-1, fim_suffix=-1, fim_middle=-1)
    m = RemoteCodeModel(Fake(), ModelConfig(vocab_size=32, block_size=4, attention="bidirectional",
                                            shift_logits=False, special=sp))
    seq = make_sequence(m, [1, 2, 3], make_policy("threshold"), 8, suffix=[4, 5], max_len=64)
    assert isinstance(seq, BidirSequence) and seq.refresh == "step"
    evs = decode_alone(m, seq, max_len=64)
    assert evs[-1].kind == "done" and seq.refreshes == seq.forwards


def test_dtype_names_and_auto(monkeypatch: pytest.MonkeyPatch) -> None:
    assert resolve_dtype("float32", "cpu") is torch.float32
    assert resolve_dtype("bfloat16", "cpu") is torch.bfloat16
    assert resolve_dtype("auto", "cuda") is torch.bfloat16
    monkeypatch.setattr(loader, "cpu_has_bf16_matmul", lambda: True)
    assert resolve_dtype("auto", "cpu") is torch.bfloat16
    monkeypatch.setattr(loader, "cpu_has_bf16_matmul", lambda: False)
    assert resolve_dtype("auto", "cpu") is torch.float32
    with pytest.raises(ValueError, match="unknown dtype 'int8'"):
        resolve_dtype("int8", "cpu")


def test_a_bf16_checkpoint_computes_in_float32_on_a_cpu_without_bf16_units_where_memory_allows(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The checkpoint's own bfloat16 on an accelerator and on a CPU with bf16 matrix units; on
    other CPUs float32 (torch multiplies bf16 there several times slower), unless float32's
    weights and cache would take more than FLOAT32_SHARE of the free memory."""
    from engine.model.memory import AVAILABLE_ENV, plan

    path = write_llada2(tmp_path / "llada2")
    cfg = json.loads((path / "config.json").read_text())
    need = plan(path, cfg, "float32", "cpu", 512).total
    monkeypatch.setattr(loader, "cpu_has_bf16_matmul", lambda: False)
    monkeypatch.setenv(AVAILABLE_ENV, str(int(need / loader.FLOAT32_SHARE) + 1))
    assert resolve_dtype("auto", "cpu", path, max_len=512) is torch.float32
    assert next(load_model(path, max_len=512).model.parameters()).dtype == torch.float32
    assert resolve_dtype("auto", "cuda", path, max_len=512) is torch.bfloat16
    assert resolve_dtype("bfloat16", "cpu", path, max_len=512) is torch.bfloat16  # the option still decides
    monkeypatch.setenv(AVAILABLE_ENV, str(int(need / loader.FLOAT32_SHARE) - 1))  # float32 would take over half
    assert resolve_dtype("auto", "cpu", path, max_len=512) is torch.bfloat16
    monkeypatch.setenv(AVAILABLE_ENV, str(int(need * 100)))
    monkeypatch.setattr(loader, "cpu_has_bf16_matmul", lambda: True)
    assert resolve_dtype("auto", "cpu", path, max_len=512) is torch.bfloat16
