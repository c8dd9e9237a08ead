"""Decoding policies: an explicit registry of names and presets, each with a typed config."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from engine.decoding.policies.base import BlockView, Decision, Policy
from engine.decoding.policies.draft_edit import QUALITY, SPEEDY, DraftEdit, DraftEditConfig
from engine.decoding.policies.indel import InDel, InDelConfig
from engine.decoding.policies.low_confidence import LowConfidence, LowConfidenceConfig
from engine.decoding.policies.one_per_step import OnePerStep, OnePerStepConfig
from engine.decoding.policies.threshold import Threshold, ThresholdConfig
from engine.presets import PRESET_NAMES

# name -> (config class, factory)
POLICIES: dict[str, tuple[type, Callable[[Any], Policy]]] = {
    "one_per_step": (OnePerStepConfig, OnePerStep),
    "low_confidence": (LowConfidenceConfig, LowConfidence),
    "threshold": (ThresholdConfig, Threshold),
    "draft_edit": (DraftEditConfig, DraftEdit),
    "indel": (InDelConfig, InDel),  # LLaDA2.2's insert/delete rule: models with edit tokens only
}

# preset name -> (policy name, config): one entry per name of engine.presets.PRESET_NAMES, in its
# order (the names' one list; tests/engine/decoding/test_decode.py checks that they agree)
PRESETS: dict[str, tuple[str, Any]] = {
    "speedy": ("draft_edit", SPEEDY),
    "quality": ("draft_edit", QUALITY),
    # the same, plus multi-block edit passes over the whole completion once its blocks are drafted
    # (engine.decoding.decode, `_prepare_multi`); off by default: bench/t2t.py --multi-block measures them
    "speedy_multi": ("draft_edit", replace(SPEEDY, multi_block=True)),
    "quality_multi": ("draft_edit", replace(QUALITY, multi_block=True)),
    "one_per_step": ("one_per_step", OnePerStepConfig()),
    "low_confidence": ("low_confidence", LowConfidenceConfig()),
    "threshold": ("threshold", ThresholdConfig()),
}


def make_policy(preset: str, **overrides: Any) -> Policy:
    """The policy of a preset (a bare policy name is a preset too, with its default config);
    keyword overrides replace config fields."""
    if preset in PRESETS:
        policy_name, cfg = PRESETS[preset]
    elif preset in POLICIES:
        policy_name, cfg = preset, POLICIES[preset][0]()
    else:
        raise ValueError(f"unknown policy or preset {preset!r}; known: {sorted(set(PRESETS) | set(POLICIES))}")
    if overrides:
        cfg = replace(cfg, **overrides)
    return POLICIES[policy_name][1](cfg)


__all__ = ["BlockView", "Decision", "DraftEdit", "InDel", "InDelConfig", "Policy", "POLICIES", "PRESETS", "PRESET_NAMES",
           "make_policy"]
