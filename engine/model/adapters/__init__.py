"""Native adapters for public diffusion-LM checkpoints, chosen by config.json.

`find_family(config)` maps a checkpoint's `model_type` (case-insensitive) or, failing that,
one of its `architectures` to a family; `FAMILIES[name].build(config, special)` constructs
the model (call it under `torch.device("meta")`; `engine.model.loader` then assigns the weights).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from engine.model.adapters import dream, llada, llada2
from engine.model.adapters.common import AdapterModel
from engine.model.native import SpecialTokens


@dataclass(frozen=True)
class Family:
    name: str
    model_types: tuple[str, ...]
    architectures: tuple[str, ...]
    build: Callable[[dict[str, Any], SpecialTokens], AdapterModel]
    attention: str  # "block_causal" (exact KV cache) or "bidirectional" (approximate cache)


FAMILIES: dict[str, Family] = {
    "llada2": Family("llada2", llada2.MODEL_TYPES, llada2.ARCHITECTURES, llada2.build, "block_causal"),
    "llada": Family("llada", llada.MODEL_TYPES, llada.ARCHITECTURES, llada.build, "bidirectional"),
    "dream": Family("dream", dream.MODEL_TYPES, dream.ARCHITECTURES, dream.build, "bidirectional"),
}


def find_family(config: dict[str, Any]) -> Family | None:
    mt = str(config.get("model_type", "")).lower()
    for fam in FAMILIES.values():
        if mt in fam.model_types:
            return fam
    archs = set(config.get("architectures") or [])
    for fam in FAMILIES.values():
        if archs & set(fam.architectures):
            return fam
    return None


def known_model_types() -> list[str]:
    return sorted(t for f in FAMILIES.values() for t in f.model_types)


__all__ = ["AdapterModel", "FAMILIES", "Family", "find_family", "known_model_types"]
