"""Native adapters for public diffusion-LM checkpoints, chosen by config.json.

`find_family(config)` maps a checkpoint's `model_type` (case-insensitive) or, failing that,
one of its `architectures` to a family; `FAMILIES[name].build(config, special)` constructs
the model (call it under `torch.device("meta")`; `engine.model.loader` then assigns the weights).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from engine.model.adapters import config_keys, dream, llada, llada2, llada_moe
from engine.model.adapters.common import AdapterModel
from engine.model.native import SpecialTokens


@dataclass(frozen=True)
class Family:
    name: str
    model_types: tuple[str, ...]
    architectures: tuple[str, ...]
    build: Callable[[dict[str, Any], SpecialTokens], AdapterModel]
    attention: str  # "block_causal" (exact KV cache) or "bidirectional" (approximate cache)
    read: frozenset[str] = frozenset()  # config.json keys the adapter reads
    ignored: dict[str, config_keys.Cond] | None = None  # keys it knowingly ignores (config_keys)
    parse: Callable[[dict[str, Any]], Any] | None = None  # the adapter's own config reading (value checks)

    def config_check(self, cfg: dict[str, Any]) -> None:
        """Refuse (ValueError naming the key) a config key the adapter does not implement, or a
        value its config reading refuses (as loading would), without touching the weights."""
        config_keys.check(self.name, cfg, set(self.read), self.ignored or {})
        if self.parse is not None:
            self.parse(cfg)


FAMILIES: dict[str, Family] = {
    "llada2": Family("llada2", llada2.MODEL_TYPES, llada2.ARCHITECTURES, llada2.build, "block_causal",
                     frozenset(config_keys.read_keys(llada2.LLaDA2Config)), config_keys.LLADA2_IGNORED,
                     llada2.LLaDA2Config.from_hf),
    "llada": Family("llada", llada.MODEL_TYPES, llada.ARCHITECTURES, llada.build, "bidirectional",
                    frozenset(config_keys.read_keys(llada.LLaDAConfig)), config_keys.LLADA_IGNORED,
                    llada.LLaDAConfig.from_hf),
    "llada_moe": Family("llada_moe", llada_moe.MODEL_TYPES, llada_moe.ARCHITECTURES, llada_moe.build, "bidirectional",
                        frozenset(config_keys.read_keys(llada_moe.LLaDAMoEConfig)), config_keys.LLADA_MOE_IGNORED,
                        llada_moe.LLaDAMoEConfig.from_hf),
    "dream": Family("dream", dream.MODEL_TYPES, dream.ARCHITECTURES, dream.build, "bidirectional",
                    frozenset(config_keys.read_keys(dream.DreamConfig)), config_keys.DREAM_IGNORED,
                    dream.DreamConfig.from_hf),
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
