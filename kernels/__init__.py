"""Kernels for the decoding step, behind one dispatch (``kernels.dispatch``).

Each kernel follows the Triton tutorials' layout: a PyTorch reference (the spec), a fast
eager PyTorch path, the Triton kernel with its launch wrapper, tests against the reference
(tests/kernels) and a benchmark (bench/kernels.py):

=============  ====================  ====================  ====================
kernel         reference             eager                 Triton
=============  ====================  ====================  ====================
confidence     ``kernels.reference``  ``kernels.eager``      ``kernels.confidence``
routed experts ``kernels.moe_reference`` ``kernels.moe_eager`` ``kernels.moe``
=============  ====================  ====================  ====================

The engine calls only the two functions exported here, ``confidence`` and ``moe_experts``;
each asks ``kernels.dispatch.choose`` which implementation runs, from ``LLADA_KERNELS``
(``auto``, ``triton``, ``eager`` or ``reference``; see ``kernels.dispatch``) or a call's
``backend=``. The ``allowed`` vocabulary mask (token healing) is supported by every
confidence implementation; the dispatch never falls back because of it.

``kernels.confidence`` (the Triton module) is imported here, when the package is, where
Triton can run (a CUDA device, or ``TRITON_INTERPRET`` set: ``triton_wanted``; elsewhere its
~70 MiB of RSS and ~1 s of import are skipped, and ``triton_available()`` is False), and
before the function ``confidence`` is defined: importing a submodule rebinds the package
attribute of the same name, so importing it first keeps ``kernels.confidence`` the
function. Use ``from kernels.confidence import ...`` to reach the module itself.
Consequence: ``TRITON_INTERPRET=1`` must be set before ``import kernels`` for Triton to
run on CPU tensors. Without Triton installed the package still imports. The MoE kernel
(``kernels.moe``) is imported on its first use.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from types import ModuleType

import torch

from kernels.dispatch import BACKENDS, ENV_VAR, choose
from kernels.eager import base, eager_confidence_tensors
from kernels.moe_eager import eager_moe, grouped_mm_supported
from kernels.moe_reference import reference_moe
from kernels.reference import reference_confidence_tensors


def _import_triton_module() -> ModuleType | None:
    """Import ``kernels.confidence``; None when Triton cannot be imported."""
    try:
        from kernels import confidence as module
    except ImportError:
        return None
    return module


def triton_wanted() -> bool:
    """Whether Triton can run here: a CUDA device, or its interpreter asked for."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0") or torch.cuda.is_available()


_TRITON: ModuleType | None = _import_triton_module() if triton_wanted() else None

__all__ = [
    "BACKENDS",
    "ENV_VAR",
    "Confidence",
    "backend_name",
    "confidence",
    "eager_moe",
    "moe_backend_name",
    "moe_experts",
    "reference_moe",
    "triton_available",
    "warm_up",
]


@dataclass(frozen=True)
class Confidence:
    """Per-row confidence of one decoding step; all tensors are [N] on the logits' device."""

    top_id: torch.Tensor  # int64 argmax over the vocabulary (ties -> lowest index)
    top_prob: torch.Tensor  # float32 softmax probability of top_id
    cur_prob: torch.Tensor | None  # float32 probability of current_ids[i]; None without ids
    margin: torch.Tensor | None  # float32 top-1 minus top-2 probability; None unless asked


def triton_available() -> bool:
    """True when Triton (and so the Triton kernels) could be imported and can run here."""
    return _TRITON is not None


def backend_name(logits: torch.Tensor, backend: str | None = None) -> str:
    """The implementation ``confidence(logits, ..., backend=backend)`` would use now:
    "triton", "eager" or "reference"."""
    name = choose(logits, triton=_TRITON is not None, backend=backend)
    if name == "triton" and not logits.is_cuda and not (_TRITON is not None and _TRITON.INTERPRETED):
        raise RuntimeError(f"{ENV_VAR}=triton with CPU logits needs TRITON_INTERPRET=1 set before "
                           "kernels is imported")
    return name


def confidence(logits: torch.Tensor, current_ids: torch.Tensor | None = None, *, want_margin: bool = False,
               allowed: torch.Tensor | None = None, backend: str | None = None) -> Confidence:
    """Top-1 id and probability, current-token probability and margin for [N, V] logits.

    ``current_ids`` is int64 [N] (a negative id means "no current token": probability
    0); ``allowed`` is an optional bool [V] mask applied before the softmax. See
    ``kernels.reference`` for the full specification. ``backend`` forces an implementation
    (one of ``kernels.dispatch.BACKENDS``) whatever the environment says.
    """
    name = backend_name(logits, backend)
    if name == "triton":
        assert _TRITON is not None  # backend_name checked it
        impl = _TRITON.triton_confidence_tensors
    else:
        impl = eager_confidence_tensors if name == "eager" else reference_confidence_tensors
    return Confidence(*impl(logits, current_ids, want_margin=want_margin, allowed=allowed))


def warm_up(device: torch.device | str) -> None:
    """The kernels' once-per-process set-up for decoding on `device`, done when a model loads
    rather than inside its first request: on the CPU, the eager confidence's timing of ``exp``
    against ``exp2`` (``kernels.eager.base``: ~1 ms quiet, more on a busy machine). Nothing
    elsewhere (Triton compiles its kernel on first use, per shape)."""
    if torch.device(device).type == "cpu":
        base()


def moe_backend_name(x: torch.Tensor, backend: str | None = None) -> str:
    """The implementation ``moe_experts(x, ..., backend=backend)`` would use now: "triton",
    "eager" (grouped GEMMs, where torch runs them on `x`) or "reference"."""
    return choose(x, triton=_triton_importable(), eager=grouped_mm_supported(x), backend=backend)


def moe_experts(x: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor,
                *, backend: str | None = None) -> torch.Tensor:
    """The routed experts' float32 output [N, D] (spec: ``kernels.moe_reference``), on the
    implementation ``moe_backend_name`` picks: Triton on CUDA, grouped GEMMs elsewhere."""
    name = moe_backend_name(x, backend)
    if name == "triton":
        from kernels import moe  # imported on first use: it builds its kernel then

        return moe.triton_moe(x, w13, w2, ids, weights)
    if name == "eager":
        return eager_moe(x, w13, w2, ids, weights)
    return reference_moe(x, w13, w2, ids, weights)


def _triton_importable() -> bool:
    if not triton_wanted():
        return False
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True
