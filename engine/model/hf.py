"""transformers integration: `AutoModel.from_pretrained(dir)` loads the native model.

`register()` adds the "llada_lsp" model type to transformers' Auto classes. Nothing calls it
for you (importing `engine` never imports transformers): call `engine.model.hf.register()`
before `from_pretrained` (README, "Models"). No remote code is involved.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import AutoConfig, AutoModel, PretrainedConfig, PreTrainedModel

from engine.model.checkpoint import MODEL_TYPE
from engine.model.native import ModelConfig, Transformer


class LladaLspConfig(PretrainedConfig):
    model_type = MODEL_TYPE

    def __init__(self, **kwargs: Any) -> None:
        fields = set(ModelConfig.__dataclass_fields__)
        native = {k: kwargs.pop(k) for k in list(kwargs) if k in fields}
        kwargs.setdefault("tie_word_embeddings", bool(native.get("tie_embeddings", True)))
        super().__init__(**kwargs)
        for k, v in (ModelConfig.from_dict(native) if native else ModelConfig()).to_dict().items():
            setattr(self, k, v)  # plain JSON values (special tokens as a dict)

    @property
    def native(self) -> ModelConfig:
        return ModelConfig.from_dict({k: getattr(self, k) for k in ModelConfig.__dataclass_fields__})


class LladaLspModel(PreTrainedModel):
    config_class = LladaLspConfig
    base_model_prefix = "model"
    _tied_weights_keys = {"model.output.weight": "model.tok_embeddings.weight"}

    def __init__(self, config: LladaLspConfig) -> None:
        super().__init__(config)
        self.model = Transformer(config.native)
        self.post_init()

    def _init_weights(self, module: torch.nn.Module) -> None:
        return None  # weights come from the checkpoint

    def get_input_embeddings(self) -> torch.nn.Module:
        return self.model.tok_embeddings

    def get_output_embeddings(self) -> torch.nn.Module:
        return self.model.output

    def forward(self, input_ids: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        """Logits [B, T, V] of a clean, causal pass (block structure: use `self.model`)."""
        from engine.model.native import CLEAN, layout_mask

        B, T = input_ids.shape
        pos = torch.arange(T, device=input_ids.device).expand(B, T)
        kind = torch.full_like(input_ids, CLEAN)
        blk = torch.full_like(input_ids, -1)
        mask = layout_mask(kind, pos, blk, kind, pos, blk, self.config.native.attention == "bidirectional")
        return self.model(input_ids, pos, mask)


_registered = False


def register() -> None:
    global _registered
    if not _registered:
        AutoConfig.register(MODEL_TYPE, LladaLspConfig)
        AutoModel.register(LladaLspConfig, LladaLspModel)
        _registered = True
