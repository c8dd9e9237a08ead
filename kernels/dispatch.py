"""The one kernel dispatch: which implementation of a kernel runs, from one variable.

Every kernel comes in three implementations: the PyTorch reference (the spec:
``kernels.reference``, ``kernels.moe_reference``), a fast eager PyTorch path
(``kernels.eager``, ``kernels.moe_eager``) and a Triton kernel (``kernels.confidence``,
``kernels.moe``). ``LLADA_KERNELS`` picks one for every kernel alike (read on every call, so
tests can change it); a call's ``backend=`` argument, one of the same values, comes first:

* ``auto`` (default): Triton when the tensors are on a CUDA device and Triton imports,
  otherwise the eager path (the reference where the eager path cannot run those tensors).
* ``triton``: always Triton. CPU tensors need ``TRITON_INTERPRET=1`` in the environment
  before the Triton module is imported (its kernels are built in interpreter mode then).
* ``eager``: always the eager PyTorch path.
* ``reference``: always the reference.
"""

from __future__ import annotations

import os

from torch import Tensor

ENV_VAR = "LLADA_KERNELS"
BACKENDS = ("auto", "triton", "eager", "reference")


def requested(backend: str | None = None) -> str:
    """`backend`, else ``LLADA_KERNELS`` (``auto`` when unset), checked against BACKENDS."""
    mode = backend or os.environ.get(ENV_VAR, "auto").strip().lower() or "auto"
    if mode not in BACKENDS:
        source = "backend" if backend else ENV_VAR
        raise ValueError(f"{source}={mode!r}: expected one of {', '.join(BACKENDS)}")
    return mode


def choose(x: Tensor, *, triton: bool, eager: bool = True, backend: str | None = None) -> str:
    """The implementation to run on `x`: "triton", "eager" or "reference" (see the module
    docstring). `triton`: whether Triton imports; `eager`: whether the eager path runs on
    `x` (``auto`` falls back to the reference otherwise). A forced ``triton`` without Triton
    is a RuntimeError."""
    mode = requested(backend)
    if mode == "triton" and not triton:
        raise RuntimeError(f"{ENV_VAR}=triton but Triton cannot be imported")
    if mode != "auto":
        return mode
    if x.is_cuda and triton:
        return "triton"
    return "eager" if eager else "reference"
