"""Independent reference forwards of LLaDA2.x, LLaDA-8B and Dream, for the parity tests.

Written from the semantics of the published modeling code (inclusionAI LLaDA2.0-mini
`modeling_llada2_moe.py`, GSAI-ML LLaDA-8B `modeling_llada.py`, Dream-org `modeling_dream.py`),
in plain float32 PyTorch, sharing nothing with `engine.model.adapters`: weights are read straight
from the safetensors files by their published names, and every piece (RMSNorm, RoPE tables,
`rotate_half`, attention with an additive mask, the MoE gate, the block-diffusion mask) is
spelled out here, one token at a time where that keeps it obvious (the MoE).

`llada2_generate` is the uncached decoding loop of LLaDA2's published `generate()`: greedy,
a full forward of the window up to the active block under the block-causal mask at every
step, threshold commits with at least one per step, and optionally LLaDA2.1's token edits
(non-prompt tokens of the active block whose argmax differs above an editing threshold) and
its post-mask edit steps.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file
from torch import Tensor

State = dict[str, Tensor]
Config = dict[str, Any]


# -- checkpoint ----------------------------------------------------------------------------
def load_checkpoint(path: Path) -> tuple[Config, State]:
    """config.json and every tensor of every *.safetensors file, in float32."""
    cfg = json.loads((path / "config.json").read_text())
    state: State = {}
    for f in sorted(path.glob("*.safetensors")):
        state.update({k: v.float() for k, v in load_file(str(f)).items()})
    return cfg, state


def linear(x: Tensor, state: State, name: str) -> Tensor:
    """x @ W^T (+ b when the checkpoint has `name.bias`)."""
    y = x @ state[name + ".weight"].T
    bias = state.get(name + ".bias")
    return y + bias if bias is not None else y


# -- shared pieces, as the published files write them ---------------------------------------
def rms_norm(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    var = (x * x).mean(dim=-1, keepdim=True)
    return weight * (x / torch.sqrt(var + eps))


def rope_tables(n: int, dim: int, theta: float) -> tuple[Tensor, Tensor]:
    """cos, sin [n, dim]: frequencies theta^(-2i/dim), repeated as cat(freqs, freqs)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    freqs = torch.arange(n, dtype=torch.float64)[:, None] * inv_freq[None, :]
    emb = torch.cat([freqs, freqs], dim=-1)
    return emb.cos().float(), emb.sin().float()


def rotate_half(x: Tensor) -> Tensor:
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def rotary(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """x [H, T, D]: rotate the first cos.shape[-1] channels, pass the rest through."""
    r = cos.shape[-1]
    xr, rest = x[..., :r], x[..., r:]
    return torch.cat([xr * cos + rotate_half(xr) * sin, rest], dim=-1)


def attention(q: Tensor, k: Tensor, v: Tensor, allowed: Tensor | None) -> Tensor:
    """q [H, T, D], k/v [Hkv, T, D]; allowed [T, T] bool (None: every pair). -> [T, H*D]."""
    h, t, d = q.shape
    group = h // k.shape[0]
    k = k[:, None].expand(-1, group, -1, -1).reshape(h, t, d)
    v = v[:, None].expand(-1, group, -1, -1).reshape(h, t, d)
    scores = q @ k.transpose(1, 2) / math.sqrt(d)
    if allowed is not None:
        scores = scores + torch.zeros(t, t).masked_fill(~allowed, float("-inf"))
    out = torch.softmax(scores, dim=-1) @ v
    return out.transpose(0, 1).reshape(t, h * d)


def swiglu(x: Tensor, state: State, gate: str, up: str, down: str) -> Tensor:
    g = linear(x, state, gate)
    return linear(g * torch.sigmoid(g) * linear(x, state, up), state, down)


def block_causal(n: int, block: int) -> Tensor:
    """LLaDA2's generate(): a lower-triangular matrix over blocks of `block` from position 0."""
    blocks = torch.tril(torch.ones(-(-n // block), -(-n // block)))
    full = blocks.repeat_interleave(block, 0).repeat_interleave(block, 1)
    return full[:n, :n].bool()


# -- LLaDA2.x (llada2_moe) ---------------------------------------------------------------------
def llada2_route(h: Tensor, state: State, p: str, cfg: Config) -> list[tuple[int, float]]:
    """One token's (expert, weight) pairs: LLaDA2MoeGate (sigmoid scores, expert bias for the
    choice only, group-limited top-k by the sum of each group's two best, renormalised, scaled)."""
    scores = torch.sigmoid(state[p + "gate.weight"] @ h)
    bias = state.get(p + "gate.expert_bias", torch.zeros_like(scores))
    choice = scores + bias
    n_group, per = cfg["n_group"], scores.shape[0] // cfg["n_group"]
    group_score = [float(choice[g * per:(g + 1) * per].topk(2).values.sum()) for g in range(n_group)]
    kept = sorted(range(n_group), key=lambda g: group_score[g], reverse=True)[: cfg["topk_group"]]
    allowed = [e for g in kept for e in range(g * per, (g + 1) * per)]
    chosen = sorted(allowed, key=lambda e: float(choice[e]), reverse=True)[: cfg["num_experts_per_tok"]]
    w = torch.stack([scores[e] for e in chosen])
    if len(chosen) > 1:
        w = w / (w.sum() + 1e-20)
    return [(e, float(x) * cfg["routed_scaling_factor"]) for e, x in zip(chosen, w, strict=True)]


def llada2_moe(x: Tensor, state: State, p: str, cfg: Config) -> Tensor:
    out: list[Tensor] = []
    for h in x:
        y = torch.zeros_like(h)
        for e, w in llada2_route(h, state, p, cfg):
            y = y + w * swiglu(h, state, f"{p}experts.{e}.gate_proj", f"{p}experts.{e}.up_proj",
                               f"{p}experts.{e}.down_proj")
        if cfg.get("num_shared_experts"):
            y = y + swiglu(h, state, p + "shared_experts.gate_proj", p + "shared_experts.up_proj",
                           p + "shared_experts.down_proj")
        out.append(y)
    return torch.stack(out)


def llada22_moe(x: Tensor, state: State, p: str, cfg: Config) -> Tensor:
    """LLaDA2.2's block-routed MoE over tokens at positions 0..T-1, one aligned block of
    `block_size` at a time (a partial last block routes over its tokens): an expert's block
    score is its best sigmoid + bias score over the block's tokens, the `expert_capacity` best
    experts form the block's pool (ties to the lower index), and each token takes its
    `num_experts_per_tok` best of the pool by sigmoid + bias; the weights are the plain sigmoid
    scores, renormalised and scaled. No group limit (docs/models.md, "LLaDA2.2")."""
    rb, cap, k = cfg["block_size"], cfg["expert_capacity"], cfg["num_experts_per_tok"]
    out: list[Tensor] = []
    for a in range(0, x.shape[0], rb):
        block = x[a:a + rb]
        scores = [torch.sigmoid(state[p + "gate.weight"] @ h) for h in block]
        bias = state.get(p + "gate.expert_bias", torch.zeros_like(scores[0]))
        choice = [s + bias for s in scores]
        n_exp = scores[0].shape[0]
        best = [max(float(c[e]) for c in choice) for e in range(n_exp)]
        pool = sorted(range(n_exp), key=lambda e: (-best[e], e))[:cap]
        for h, s, c in zip(block, scores, choice, strict=True):
            chosen = sorted(pool, key=lambda e: (-float(c[e]), e))[:k]
            w = torch.stack([s[e] for e in chosen])
            if len(chosen) > 1:
                w = w / (w.sum() + 1e-20)
            y = torch.zeros_like(h)
            for e, we in zip(chosen, w, strict=True):
                y = y + we * cfg["routed_scaling_factor"] * swiglu(
                    h, state, f"{p}experts.{e}.gate_proj", f"{p}experts.{e}.up_proj", f"{p}experts.{e}.down_proj")
            if cfg.get("num_shared_experts"):
                y = y + swiglu(h, state, p + "shared_experts.gate_proj", p + "shared_experts.up_proj",
                               p + "shared_experts.down_proj")
            out.append(y)
    return torch.stack(out)


def llada2_attention(x: Tensor, state: State, p: str, cfg: Config, cos: Tensor, sin: Tensor,
                     allowed: Tensor | None) -> Tensor:
    H, KV = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = cfg.get("head_dim") or cfg["hidden_size"] // H
    t = x.shape[0]
    qkv = linear(x, state, p + "query_key_value").view(t, H + 2 * KV, hd).transpose(0, 1)
    q, k, v = qkv[:H], qkv[H:H + KV], qkv[H + KV:]
    if cfg.get("use_qk_norm", False):
        q = rms_norm(q, state[p + "query_layernorm.weight"], cfg["rms_norm_eps"])
        k = rms_norm(k, state[p + "key_layernorm.weight"], cfg["rms_norm_eps"])
    q, k = rotary(q, cos, sin), rotary(k, cos, sin)
    return linear(attention(q, k, v, allowed), state, p + "dense")


def llada2_logits(cfg: Config, state: State, ids: list[int], allowed: Tensor | None) -> Tensor:
    """LLaDA2MoeModelLM.forward: logits [T, V] of `ids` at positions 0..T-1."""
    H = cfg["num_attention_heads"]
    hd = cfg.get("head_dim") or cfg["hidden_size"] // H
    eps = cfg["rms_norm_eps"]
    cos, sin = rope_tables(len(ids), int(hd * cfg.get("partial_rotary_factor", 1.0)), cfg["rope_theta"])
    x = state["model.word_embeddings.weight"][torch.tensor(ids)]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        x = x + llada2_attention(rms_norm(x, state[p + "input_layernorm.weight"], eps), state, p + "attention.",
                                 cfg, cos, sin, allowed)
        h = rms_norm(x, state[p + "post_attention_layernorm.weight"], eps)
        if cfg.get("num_experts") is not None and i >= cfg["first_k_dense_replace"]:
            moe = llada22_moe if cfg.get("expert_capacity") is not None else llada2_moe
            x = x + moe(h, state, p + "mlp.", cfg)
        else:
            x = x + swiglu(h, state, p + "mlp.gate_proj", p + "mlp.up_proj", p + "mlp.down_proj")
    x = rms_norm(x, state["model.norm.weight"], eps)
    head = "model.word_embeddings.weight" if cfg.get("tie_word_embeddings") else "lm_head.weight"
    return x @ state[head].T


def llada2_generate(cfg: Config, state: State, prompt: list[int], gen_length: int, block: int,
                    threshold: float, mask_id: int, edit_threshold: float | None = None,
                    max_post_steps: int = 0) -> tuple[list[int], int]:
    """LLaDA2's generate() at temperature 0, without an end-of-text stop, `steps` = `block`
    (so at least one commit a step): LLaDA2.0's threshold rule, plus LLaDA2.1's edits when
    `edit_threshold` is given. Returns the canvas after the prompt (to the last block's end)
    and the number of forwards taken."""
    P = len(prompt)
    n_blocks = -(-(P + gen_length) // block)
    x = prompt + [mask_id] * (n_blocks * block - P)
    allowed = block_causal(n_blocks * block, block)
    forwards = 0
    for b in range(P // block, n_blocks):
        end = (b + 1) * block
        forwards += llada2_block(cfg, state, x, P, end, block, allowed[:end, :end], threshold, mask_id,
                                 edit_threshold, max_post_steps)
    return x[P:], forwards


def llada2_block(cfg: Config, state: State, x: list[int], P: int, end: int, block: int, allowed: Tensor,
                 threshold: float, mask_id: int, edit_threshold: float | None, max_post_steps: int) -> int:
    """Denoise x[end - block:end] in place; returns the forwards taken. Each step: commit the
    masked positions whose top probability passes `threshold` (else the single most confident
    one); with `edit_threshold`, also replace the non-prompt tokens committed before this step
    whose argmax differs and passes it. Once no mask is left, up to `max_post_steps` more
    edit-only steps, stopping after one that changes nothing."""
    start, forwards, post = end - block, 0, 0
    while True:
        masked = [j for j in range(start, end) if x[j] == mask_id]
        if not masked:
            post += 1
            if edit_threshold is None or post > max_post_steps:
                return forwards
        probs = torch.softmax(llada2_logits(cfg, state, x[:end], allowed)[start:end], dim=-1)
        forwards += 1
        conf, top = probs.max(dim=-1)
        commit = [j for j in masked if float(conf[j - start]) > threshold]
        if not commit and masked:
            commit = [max(masked, key=lambda j: float(conf[j - start]))]
        edits = []
        if edit_threshold is not None:
            edits = [j for j in range(max(start, P), end) if x[j] != mask_id and int(top[j - start]) != x[j]
                     and float(conf[j - start]) > edit_threshold]
        for j in commit + edits:
            x[j] = int(top[j - start])
        if not masked and not edits:
            return forwards


# -- LLaDA-8B and Dream: the same pre-norm block under other names -------------------------------
def prenorm_layer(x: Tensor, state: State, names: list[str], heads: tuple[int, int, int], cos: Tensor,
                  sin: Tensor, eps: float) -> Tensor:
    """One bidirectional pre-norm block, as LLaDA's "llama" block and Qwen2's decoder layer (Dream)
    compute it: x + o(attention(rotary q, rotary k, v)) over the normed x, then x + SwiGLU over the
    normed x. names: attention norm, q, k, v, o, feed-forward norm, gate, up, down; heads:
    (query heads, key/value heads, head dim)."""
    attn_norm, q_name, k_name, v_name, o_name, ff_norm, gate, up, down = names
    H, KV, hd = heads
    t = x.shape[0]
    h = rms_norm(x, state[attn_norm], eps)
    q = linear(h, state, q_name).view(t, H, hd).transpose(0, 1)
    k = linear(h, state, k_name).view(t, KV, hd).transpose(0, 1)
    v = linear(h, state, v_name).view(t, KV, hd).transpose(0, 1)
    x = x + linear(attention(rotary(q, cos, sin), rotary(k, cos, sin), v, None), state, o_name)
    h = rms_norm(x, state[ff_norm], eps)
    return x + swiglu(h, state, gate, up, down)


# -- LLaDA-8B (llada) --------------------------------------------------------------------------
def llada_logits(cfg: Config, state: State, ids: list[int]) -> Tensor:
    """LLaDAModelLM.forward with no attention bias (fully bidirectional): logits [T, E]."""
    D, H = cfg["d_model"], cfg["n_heads"]
    KV = 1 if cfg.get("multi_query_attention") else (cfg.get("n_kv_heads") or H)
    hd, eps, t = D // H, cfg["rms_norm_eps"], len(ids)
    cos, sin = rope_tables(t, hd, cfg["rope_theta"])
    x = state["model.transformer.wte.weight"][torch.tensor(ids)]
    if cfg.get("input_emb_norm"):
        x = x * D ** 0.5
    for i in range(cfg["n_layers"]):
        p = f"model.transformer.blocks.{i}."
        names = ("attn_norm.weight", "q_proj", "k_proj", "v_proj", "attn_out", "ff_norm.weight", "ff_proj",
                 "up_proj", "ff_out")
        x = prenorm_layer(x, state, [p + n for n in names], (H, KV, hd), cos, sin, eps)
    x = rms_norm(x, state["model.transformer.ln_f.weight"], eps)
    if cfg.get("weight_tying"):
        logits = x @ state["model.transformer.wte.weight"].T
    else:
        logits = linear(x, state, "model.transformer.ff_out")
    return logits / math.sqrt(D) if cfg.get("scale_logits") else logits


# -- Dream (Qwen2-shaped, bidirectional) ---------------------------------------------------------
def dream_logits(cfg: Config, state: State, ids: list[int]) -> Tensor:
    """DreamModel.forward with a full attention mask: the raw logits [T, V] (unshifted; the
    sampler reads position i's prediction from row i - 1)."""
    D, H, KV = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd, eps, t = D // H, cfg["rms_norm_eps"], len(ids)
    cos, sin = rope_tables(t, hd, cfg["rope_theta"])
    x = state["model.embed_tokens.weight"][torch.tensor(ids)]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        names = ("input_layernorm.weight", "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                 "self_attn.o_proj", "post_attention_layernorm.weight", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")
        x = prenorm_layer(x, state, [p + n for n in names], (H, KV, hd), cos, sin, eps)
    x = rms_norm(x, state["model.norm.weight"], eps)
    head = "model.embed_tokens.weight" if cfg.get("tie_word_embeddings") else "lm_head.weight"
    return x @ state[head].T
