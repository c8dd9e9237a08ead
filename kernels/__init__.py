"""Kernels for the decoding step, behind one dispatch.

Every kernel has a PyTorch reference (``kernels.reference``, the spec) and a Triton
implementation (``kernels.confidence``). The engine calls only the dispatch functions
exported here, which pick a backend per call:

``LLADA_KERNELS`` (read on every call, so tests can change it):

* ``auto`` (default): Triton when the logits are on a CUDA device and Triton imports,
  otherwise the fast eager PyTorch path (``kernels.eager``).
* ``triton``: always Triton. CPU tensors need ``TRITON_INTERPRET=1`` in the environment
  before the first Triton call (the kernels are built in interpreter mode on import).
* ``eager``: always the fast eager PyTorch path.
* ``reference``: always the reference.

The ``allowed`` vocabulary mask (token healing) is supported by both backends; the
dispatch never falls back because of it.

``kernels.confidence`` (the Triton module) is imported here, when the package is, and
before the dispatch function ``confidence`` is defined: importing a submodule rebinds the
package attribute of the same name, so importing it first keeps ``kernels.confidence``
the function. Use ``from kernels.confidence import ...`` to reach the module itself.
Consequence: ``TRITON_INTERPRET=1`` must be set before ``import kernels`` for Triton to
run on CPU tensors. Without Triton installed the package still imports (reference only).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from types import ModuleType

import torch

from kernels.eager import eager_confidence_tensors
from kernels.moe_reference import (
    MOE_BACKENDS,
    eager_moe,
    moe_backend_name,
    moe_experts,
    reference_moe,
)
from kernels.reference import reference_confidence_tensors


def _import_triton_module() -> ModuleType | None:
    """Import ``kernels.confidence``; None when Triton cannot be imported."""
    try:
        from kernels import confidence as module
    except ImportError:
        return None
    return module


_TRITON: ModuleType | None = _import_triton_module()

__all__ = [
    "BACKENDS",
    "MOE_BACKENDS",
    "ENV_VAR",
    "Confidence",
    "backend_name",
    "confidence",
    "eager_confidence",
    "eager_moe",
    "moe_backend_name",
    "moe_experts",
    "reference_confidence",
    "reference_moe",
    "triton_available",
    "triton_confidence",
]

ENV_VAR = "LLADA_KERNELS"
BACKENDS = ("auto", "triton", "eager", "reference")


@dataclass(frozen=True)
class Confidence:
    """Per-row confidence of one decoding step; all tensors are [N] on the logits' device."""

    top_id: torch.Tensor  # int64 argmax over the vocabulary (ties -> lowest index)
    top_prob: torch.Tensor  # float32 softmax probability of top_id
    cur_prob: torch.Tensor | None  # float32 probability of current_ids[i]; None without ids
    margin: torch.Tensor | None  # float32 top-1 minus top-2 probability; None unless asked


def triton_available() -> bool:
    """True when Triton (and so the Triton kernels) could be imported."""
    return _TRITON is not None


def _requested_backend() -> str:
    mode = os.environ.get(ENV_VAR, "auto").strip().lower() or "auto"
    if mode not in BACKENDS:
        raise ValueError(f"{ENV_VAR}={mode!r}: expected one of {', '.join(BACKENDS)}")
    return mode


def backend_name(logits: torch.Tensor) -> str:
    """The backend ``confidence(logits, ...)`` would use now: "triton", "eager" or "reference"."""
    mode = _requested_backend()
    if mode in ("reference", "eager"):
        return mode
    if mode == "triton":
        if _TRITON is None:
            raise RuntimeError(f"{ENV_VAR}=triton but Triton cannot be imported")
        if not logits.is_cuda and not _TRITON.INTERPRETED:
            raise RuntimeError(
                f"{ENV_VAR}=triton with CPU logits needs TRITON_INTERPRET=1 set before "
                "kernels is imported"
            )
        return "triton"
    return "triton" if logits.is_cuda and triton_available() else "eager"


def reference_confidence(
    logits: torch.Tensor,
    current_ids: torch.Tensor | None = None,
    *,
    want_margin: bool = False,
    allowed: torch.Tensor | None = None,
) -> Confidence:
    """The PyTorch reference, whatever the environment says."""
    return Confidence(
        *reference_confidence_tensors(logits, current_ids, want_margin=want_margin, allowed=allowed)
    )


def eager_confidence(
    logits: torch.Tensor,
    current_ids: torch.Tensor | None = None,
    *,
    want_margin: bool = False,
    allowed: torch.Tensor | None = None,
) -> Confidence:
    """The fast eager PyTorch path, whatever the environment says."""
    return Confidence(*eager_confidence_tensors(logits, current_ids, want_margin=want_margin, allowed=allowed))


def triton_confidence(
    logits: torch.Tensor,
    current_ids: torch.Tensor | None = None,
    *,
    want_margin: bool = False,
    allowed: torch.Tensor | None = None,
) -> Confidence:
    """The fused Triton kernel, whatever the environment says."""
    if _TRITON is None:
        raise RuntimeError("Triton cannot be imported")
    return Confidence(
        *_TRITON.triton_confidence_tensors(
            logits, current_ids, want_margin=want_margin, allowed=allowed
        )
    )


def confidence(
    logits: torch.Tensor,
    current_ids: torch.Tensor | None = None,
    *,
    want_margin: bool = False,
    allowed: torch.Tensor | None = None,
) -> Confidence:
    """Top-1 id and probability, current-token probability and margin for [N, V] logits.

    ``current_ids`` is int64 [N] (a negative id means "no current token": probability
    0); ``allowed`` is an optional bool [V] mask applied before the softmax. See
    ``kernels.reference`` for the full specification.
    """
    backend = backend_name(logits)
    if backend == "triton":
        return triton_confidence(logits, current_ids, want_margin=want_margin, allowed=allowed)
    if backend == "eager":
        return eager_confidence(logits, current_ids, want_margin=want_margin, allowed=allowed)
    return reference_confidence(logits, current_ids, want_margin=want_margin, allowed=allowed)
