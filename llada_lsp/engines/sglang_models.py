"""What SGLang serves as a diffusion model, and what a server does with it (docs/scale-out.md,
"Which models").

From the sglang 0.5.23 wheel (tests/llada_lsp/engines/test_sglang_models.py reads these facts
from it):
- `srt/dllm/config.py:DllmConfig.from_server_args`: `--dllm-algorithm` accepts the
  architectures `LLaDA2MoeModelLM` (LLaDA2.0, 2.1 and 2.2), `SDARForCausalLM`,
  `SDARMoeForCausalLM` and `DiffusionGemmaForBlockDiffusion`; any other is "Unknown diffusion
  LLM", and its model registry has no LLaDA-8B (`LLaDAModelLM`) or Dream model.
- `srt/models/llada2.py`: block routing (LLaDA2.2) is on exactly when the model config has
  `expert_capacity` (the checkpoint's config.json, or `--json-model-override-args`).
- `srt/dllm/algorithm/joint_threshold_indel.py`: `--dllm-algorithm JointThresholdInDel`
  decodes with insertions and deletions (the server refuses to start on a checkpoint that
  names no `delete_token_id` / `split_token_id`).
- `/server_info` answers the resolved server arguments (`srt/utils/common.py:
  build_server_info`), `dllm_algorithm` and `json_model_override_args` among them;
  `/model_info` the model's `architectures`.
This client prompts LLaDA2 models only. No torch here.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

# DllmConfig.from_server_args's architectures, as the docs name them
DIFFUSION_ARCHITECTURES: dict[str, str] = {
    "LLaDA2MoeModelLM": "LLaDA2.x",
    "SDARForCausalLM": "SDAR",
    "SDARMoeForCausalLM": "SDAR-MoE",
    "DiffusionGemmaForBlockDiffusion": "DiffusionGemma",
}
PROMPTED = "LLaDA2MoeModelLM"  # the one this client builds prompts for
INDEL_ALGORITHM = "JointThresholdInDel"


def refusal(family: str | None, architectures: Iterable[str]) -> str | None:
    """Why a server's model cannot serve this client, or None for a LLaDA2 model (`family`:
    `sglang_servers.family_of`'s answer)."""
    arch = [str(a) for a in architectures]
    if family == "llada2" and all(a == PROMPTED for a in arch):
        return None
    other = [DIFFUSION_ARCHITECTURES[a] for a in arch if a in DIFFUSION_ARCHITECTURES and a != PROMPTED]
    if other:
        return (f"SGLang serves {other[0]} as a diffusion model, but this client prompts LLaDA2.x models "
                f"({PROMPTED}) only")
    return ("not a model SGLang serves as a diffusion model for this client: SGLang 0.5.23 serves LLaDA2.x "
            f"({PROMPTED}), SDAR and DiffusionGemma, not LLaDA-8B or Dream (use the native engine for "
            "those), and this client prompts LLaDA2.x only")


def local_config(model_dir: Path) -> dict[str, Any]:
    """The local checkpoint's config.json ({} when it has none or it does not parse)."""
    try:
        cfg = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return cfg if isinstance(cfg, dict) else {}


def _overrides(info: Mapping[str, Any]) -> dict[str, Any]:
    raw = info.get("json_model_override_args") or "{}"
    try:
        out = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        return {}
    return out if isinstance(out, dict) else {}


def capabilities(server_infos: Iterable[Mapping[str, Any]], config: Mapping[str, Any]) -> dict[str, Any]:
    """What the servers do with a LLaDA2 checkpoint whose config.json is `config`, from each
    server's `/server_info`: `indel` (every server runs JointThresholdInDel), `block_routing`
    (every server routes by blocks: the config, or the server's overrides, sets
    `expert_capacity`), and `algorithms` (what each runs). False while none has reported."""
    infos = [i for i in server_infos if i]
    algorithms = [str(i.get("dllm_algorithm")) for i in infos]
    routed = []
    for i in infos:
        over = _overrides(i)
        routed.append((over if "expert_capacity" in over else config).get("expert_capacity") is not None)
    return {"indel": bool(infos) and all(a == INDEL_ALGORITHM for a in algorithms),
            "block_routing": bool(infos) and all(routed),
            "algorithms": sorted(set(algorithms))}
