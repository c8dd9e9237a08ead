"""Which config.json keys each adapter implements: an allow-list, so a checkpoint that needs
something the adapter does not do is refused by name instead of being silently misread.

A key is allowed when the adapter reads it (its config dataclass's fields, plus aliases) or
knowingly ignores it: generic Hugging Face bookkeeping, training-only settings, and keys whose
published value changes nothing here (a condition checks that value where one matters).
LLaDA2.2's block-routing and edit-token keys are read by the LLaDA2 adapter (its config dataclass).
Checked against the published configs in tests/fakes/published.py.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields
from typing import Any

Cond = Callable[[Any, dict[str, Any]], bool] | None  # (value, whole config) -> acceptable

# every family: transformers' own bookkeeping, token ids (read by engine.model.loader), dropout
COMMON: dict[str, Cond] = {k: None for k in (
    "architectures", "auto_map", "model_type", "torch_dtype", "dtype", "transformers_version", "use_cache",
    "initializer_range", "bos_token_id", "eos_token_id", "pad_token_id", "mask_token_id", "_name_or_path",
    "attention_dropout", "embedding_dropout", "output_dropout", "residual_dropout", "output_router_logits",
    "output_attentions", "output_hidden_states", "return_dict", "keys_to_ignore_at_inference",
)}

LLADA2_IGNORED: dict[str, Cond] = {
    "block_length": None,  # read as block_size
    "moe_router_enable_expert_bias": None,  # the adapter uses expert_bias whenever the checkpoint has it
    "max_window_layers": None,  # no sliding window in LLaDA2
    "router_dtype": None,  # the router runs in float32 here whatever the weights' dtype
    "rotary_dim": lambda v, c: v is None or v == int((c.get("head_dim") or c.get("hidden_size", 0)
                                                       // max(c.get("num_attention_heads", 1), 1))
                                                      * c.get("partial_rotary_factor", 0.5)),
    "use_rmsnorm": lambda v, c: v is True,
    "norm_softmax": lambda v, c: v is False,
    "num_nextn_predict_layers": lambda v, c: not v,
    "mtp_loss_scaling_factor": None,  # training only
    "moe_shared_expert_intermediate_size": lambda v, c: v is None or v == c.get("moe_intermediate_size", 512)
                                                       * (c.get("num_shared_experts") or 1),
}

LLADA_IGNORED: dict[str, Cond] = {k: None for k in (
    "alibi_bias_max",  # alibi itself is refused unless false
    "attention_layer_norm_with_affine",  # attention_layer_norm itself is refused unless false
    "flash_attention", "init_cutoff_factor", "init_device", "init_fn", "init_std", "precision",
    "mlp_ratio",  # mlp_hidden_size is read and wins, as in the published code
    "rope_full_precision",  # rotary tables are computed in float32 here
)}

DREAM_IGNORED: dict[str, Cond] = {
    "use_sliding_window": lambda v, c: v is False,
    "sliding_window": None,  # only with use_sliding_window
    "max_window_layers": None,  # only with use_sliding_window
    "use_mrope": lambda v, c: not v,
}

# LLaDA-MoE: what its published modeling code (modeling_lladamoe.py) never reads in a forward
LLADA_MOE_IGNORED: dict[str, Cond] = {
    "router_aux_loss_coef": None,  # training only
    "norm_topk_prob": None,  # the published MoE block fixes it to False whatever the config says
    "router_num_group": lambda v, c: v is None,  # no group-limited routing in the published block
    "router_topk_group": lambda v, c: v is None,
    "routed_scaling_factor": lambda v, c: v in (None, 1, 1.0),  # not applied by the published block
}


def read_keys(config_cls: type) -> set[str]:
    return {f.name for f in fields(config_cls)}


def check(family: str, cfg: dict[str, Any], read: set[str], ignored: dict[str, Cond]) -> None:
    """Raise ValueError naming every key of `cfg` the adapter neither reads nor knowingly ignores,
    and every ignored key whose value would change the model."""
    allowed = read | set(ignored) | set(COMMON)
    unknown = sorted(k for k in cfg if k not in allowed)
    if unknown:
        raise ValueError(f"{family}: config key(s) {', '.join(unknown)} not implemented by this adapter; "
                         "refusing rather than misreading the checkpoint (engine/model/adapters/config_keys.py)")
    bad = [f"{k}={cfg[k]!r}" for k, cond in ignored.items() if k in cfg and cond is not None and not cond(cfg[k], cfg)]
    if bad:
        raise ValueError(f"{family}: config value(s) {', '.join(bad)} not implemented by this adapter")
