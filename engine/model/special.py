"""A model's named special token ids (torch-free: the prompt side and the SGLang backend use them)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SpecialTokens:
    """Named special token ids of one model: no magic numbers elsewhere."""

    mask: int
    end_of_text: int
    end_of_middle: int
    pad: int
    fim_prefix: int
    fim_suffix: int
    fim_middle: int
