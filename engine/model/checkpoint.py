"""Checkpoint layout shared by the native loader and `transformers.from_pretrained`.

A directory with `config.json` (model_type "llada_lsp" plus the ModelConfig fields),
`model.safetensors` (keys `model.<native name>`; a tied output head is not stored) and
`tokenizer.json`. The embedded default lives in `engine/checkpoints/tiny-code/`.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from engine.model.model_path import EMBEDDED_DIR
from engine.model.native import ModelConfig, Transformer

__all__ = ["EMBEDDED_DIR", "cpu_gemm_layout", "load_checkpoint", "load_config", "save_checkpoint"]

MODEL_TYPE = "llada_lsp"
WEIGHT_PREFIX = "model."


def save_checkpoint(model: Transformer, out: Path, tokenizer_json: Path | None = None,
                    dtype: torch.dtype = torch.float32) -> None:
    out.mkdir(parents=True, exist_ok=True)
    cfg = {"model_type": MODEL_TYPE, "architectures": ["LladaLspModel"], **model.config.to_dict()}
    (out / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    state = {}
    for name, t in model.state_dict().items():
        if model.config.tie_embeddings and name == "output.weight":
            continue
        state[WEIGHT_PREFIX + name] = t.detach().to("cpu", dtype).contiguous()
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    if tokenizer_json is not None and tokenizer_json.resolve() != (out / "tokenizer.json").resolve():
        shutil.copyfile(tokenizer_json, out / "tokenizer.json")


def load_config(path: Path) -> ModelConfig:
    d = json.loads((path / "config.json").read_text())
    if d.get("model_type") != MODEL_TYPE:
        raise ValueError(f"{path}: model_type {d.get('model_type')!r} is not {MODEL_TYPE!r}")
    return ModelConfig.from_dict(d)


def load_checkpoint(path: str | Path, device: str | torch.device = "cpu",
                    dtype: torch.dtype = torch.float32) -> Transformer:
    """Build on the meta device and assign the stored tensors (no second copy in memory)."""
    path = Path(path)
    cfg = load_config(path)
    with torch.device("meta"):
        model = Transformer(cfg)
    state = {k.removeprefix(WEIGHT_PREFIX): v.to(device=device, dtype=dtype)
             for k, v in load_file(str(path / "model.safetensors")).items()}
    if cfg.tie_embeddings:
        state["output.weight"] = state["tok_embeddings.weight"]
    model.load_state_dict(state, strict=False, assign=True)
    if cfg.tie_embeddings:
        model.output.weight = model.tok_embeddings.weight
    missing = [n for n, p in model.named_parameters() if p.is_meta]
    if missing:
        raise ValueError(f"{path}: checkpoint lacks weights {missing[:5]}")
    return model.eval()


def cpu_gemm_layout(model: Transformer) -> None:
    """Lay each float32 linear weight of a model that runs on the CPU out as [in, out] in
    memory (the parameter stays the same [out, in] tensor, a transposed view: same values,
    same shapes, same state dict). The CPU GEMM then reads the weights without transposing
    them: the same bits for a block's 4-250 rows (`tests/engine/model/test_model.py`), a decode
    step of tiny-code 1.11-1.15x faster here (`bench/step_work.py` `gemm_layout`). A
    tied output head gets its own copy so that the embedding's rows stay contiguous for its
    lookups. For inference only: a trainer keeps the stored layout."""
    tied = model.output.weight is model.tok_embeddings.weight
    for mod in model.modules():
        if not isinstance(mod, torch.nn.Linear) or mod.weight.device.type != "cpu" or mod.weight.dtype != torch.float32:
            continue
        w = mod.weight
        laid = w.detach().t().contiguous().t()
        if mod is model.output and tied:
            mod.weight = torch.nn.Parameter(laid, requires_grad=w.requires_grad)
        else:
            mod.weight.data = laid
