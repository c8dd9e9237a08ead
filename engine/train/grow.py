"""Depth growth: a deeper model that computes exactly what a trained shallower one does.

Layer i of the deeper model (M layers) takes layer floor(i * L / M) of the trained one (L
layers). The first copy of each trained layer is that layer; a repeat is a new layer that
starts from the same weights with its two output projections (attention `wo`, feed-forward
`w2`) zeroed, so it adds nothing to the residual stream until training moves them. The loss
starts where the trained model's is, with more capacity to lower it.
"""

from __future__ import annotations

import re

from torch import Tensor

LAYER = re.compile(r"layers\.(\d+)\.(.+)")
ZEROED = ("attention.wo.weight", "feed_forward.w2.weight")


def layer_sources(trained: int, deeper: int) -> list[int]:
    """For each layer of the deeper model, the trained layer it starts from."""
    if not 0 < trained <= deeper:
        raise ValueError(f"cannot grow {trained} layers into {deeper}")
    return [i * trained // deeper for i in range(deeper)]


def grown_state(state: dict[str, Tensor], trained: int, deeper: int) -> dict[str, Tensor]:
    """The deeper model's state dict from the trained one's (non-layer tensors as they are)."""
    out = {k: v for k, v in state.items() if not LAYER.match(k)}
    seen: set[int] = set()
    for i, src in enumerate(layer_sources(trained, deeper)):
        repeat = src in seen
        seen.add(src)
        for k, v in state.items():
            m = LAYER.match(k)
            if m and int(m.group(1)) == src:
                name = m.group(2)
                out[f"layers.{i}.{name}"] = v.clone().zero_() if repeat and name in ZEROED else v.clone()
    return out
