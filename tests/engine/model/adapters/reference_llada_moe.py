"""An independent reference forward of LLaDA-MoE for the parity tests, written from the semantics
of the published modeling code (`modeling_lladamoe.py`: OLMoE's layout, bidirectional), in plain
float32 PyTorch, one token at a time in the MoE, sharing nothing with `engine.model.adapters`.

Per layer: x + o(attention) over RMSNorm(x), where q and k are RMS-normed per head (weights of
head_dim) when `qk_layernorm`, then q, k, v clamped to +-clip_qkv when set, then rotary over
the first `partial_rotary_factor` of each head; then x + MLP over RMSNorm(x): dense SwiGLU where
`moe_layer_freq` is 0, else softmax over the router's logits (+ `expert_bias` when enabled), the
top-k by that value, each chosen expert's SwiGLU times that value (never renormalised), plus the
shared expert when configured. Logits unshifted.
"""

from __future__ import annotations

import torch
from torch import Tensor

from tests.engine.model.adapters.reference_models import (
    Config,
    State,
    attention,
    linear,
    rms_norm,
    rope_tables,
    rotary,
    swiglu,
)


def moe(h: Tensor, state: State, p: str, cfg: Config, renormalise: bool = False) -> Tensor:
    out = torch.zeros_like(h)
    for t in range(h.shape[0]):
        probs = torch.softmax(h[t] @ state[p + "mlp.gate.weight"].T, dim=-1)
        if p + "mlp.expert_bias" in state:
            probs = probs + state[p + "mlp.expert_bias"]
        order = sorted(range(probs.shape[0]), key=lambda e: -float(probs[e]))[: cfg["num_experts_per_tok"]]
        total = sum(float(probs[e]) for e in order) if renormalise else 1.0
        for e in order:
            q = p + f"mlp.experts.{e}."
            out[t] += float(probs[e]) / total * swiglu(h[t:t + 1], state, q + "gate_proj", q + "up_proj",
                                                       q + "down_proj")[0]
    if p + "shared_expert.gate_proj.weight" in state:
        q = p + "shared_expert."
        out = out + swiglu(h, state, q + "gate_proj", q + "up_proj", q + "down_proj")
    return out


def llada_moe_logits(cfg: Config, state: State, ids: list[int], renormalise: bool = False) -> Tensor:
    """LLaDAMoEModelLM.forward without an attention mask: logits [T, V]."""
    D, H, KV = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd, eps, t = D // H, cfg["rms_norm_eps"], len(ids)
    cos, sin = rope_tables(t, int(hd * cfg.get("partial_rotary_factor", 1.0)), cfg["rope_theta"])
    clip = cfg.get("clip_qkv")
    freq = cfg.get("moe_layer_freq") or [1] * cfg["num_hidden_layers"]
    x = state["model.embed_tokens.weight"][torch.tensor(ids)]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        h = rms_norm(x, state[p + "input_layernorm.weight"], eps)
        q = linear(h, state, p + "self_attn.q_proj").view(t, H, hd)
        k = linear(h, state, p + "self_attn.k_proj").view(t, KV, hd)
        v = linear(h, state, p + "self_attn.v_proj").view(t, KV, hd)
        if cfg.get("qk_layernorm", True):
            q = rms_norm(q, state[p + "self_attn.q_norm.weight"], eps)
            k = rms_norm(k, state[p + "self_attn.k_norm.weight"], eps)
        if clip is not None:
            q, k, v = q.clamp(-clip, clip), k.clamp(-clip, clip), v.clamp(-clip, clip)
        q, k, v = q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1)
        x = x + linear(attention(rotary(q, cos, sin), rotary(k, cos, sin), v, None), state, p + "self_attn.o_proj")
        h = rms_norm(x, state[p + "post_attention_layernorm.weight"], eps)
        if freq[i]:
            x = x + moe(h, state, p, cfg, renormalise)
        else:
            x = x + swiglu(h, state, p + "mlp.gate_proj", p + "mlp.up_proj", p + "mlp.down_proj")
    x = rms_norm(x, state["model.norm.weight"], eps)
    head = "model.embed_tokens.weight" if cfg.get("tie_word_embeddings") else "lm_head.weight"
    return x @ state[head].T
