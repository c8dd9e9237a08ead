"""The decoding presets by name: the one list that the language server (its `mode` option), the
command lines (`--mode`), the SGLang backend and the engine (`engine.decoding.policies.PRESETS`,
each name's policy and config) share. Torch-free, so that `llada_lsp` may import it.

A request names its preset in its plan (`engine.api.Plan.preset`); the language server always
does (`llada_lsp.completion.plans.make_plan`, from the `mode` option at the time of the request). A plan
that names none (another client of the daemon, a bench) gets DEFAULT_PRESET, decided once when
the request enters the step loop (`engine.api.decided`).
"""

from __future__ import annotations

from typing import Final

DEFAULT_PRESET: Final = "speedy"  # the preset of a request whose plan names none

# the presets a user picks: the LSP `mode` option, `llada-lsp --mode`, the SGLang urls' keys
MODES: tuple[str, ...] = ("speedy", "quality")

# every preset name: the MODES, then ones the LSP `mode` option does NOT offer (a plan or the
# engine CLI's --mode may name them): the multi-block edit-pass variants (off by default,
# bench/t2t.py --multi-block) and the baseline policies under their own names
PRESET_NAMES: tuple[str, ...] = (*MODES, "speedy_multi", "quality_multi", "one_per_step", "low_confidence",
                                 "threshold")

# candidates a preset decodes when the plan does not say (engine.decoding.alternatives): Quality spends rows on them
PRESET_ALTERNATIVES: dict[str, int] = {"quality": 4}
