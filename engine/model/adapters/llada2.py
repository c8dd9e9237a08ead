"""LLaDA2.x (model_type "llada2_moe", e.g. LLaDA2.0-mini / LLaDA2.1-mini, 16B MoE), native.

Block-causal masked diffusion: attention is bidirectional inside aligned blocks of 32 and
causal across blocks, over the prompt as well; logits are not shifted (position i predicts
token i). Layers: grouped-query attention on a fused `query_key_value` projection, per-head
RMS QK norm, partial rotary (the first `partial_rotary_factor` of each head), then a dense
SwiGLU MLP for the first `first_k_dense_replace` layers and a mixture of experts after:
sigmoid (or softmax) router scores, plus `expert_bias` for the choice only, group-limited
top-k (the best `topk_group` of `n_group` groups by the sum of their two best scores),
weights renormalised and scaled by `routed_scaling_factor`, plus always-on shared experts.

Module names follow the public checkpoint (`model.word_embeddings`, `model.layers.N.attention
.query_key_value`, `...mlp.experts.E.gate_proj`, `...mlp.gate.expert_bias`, `lm_head`).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

import kernels
from engine.model.adapters.common import AdapterModel, CacheAt, RMSNorm, Rope, apply_rope, attend
from engine.model.native import KVCache, ModelConfig, SpecialTokens

MODEL_TYPES = ("llada2_moe",)
ARCHITECTURES = ("LLaDA2MoeModelLM",)


@dataclass(frozen=True)
class LLaDA2Config:
    """The config.json keys this adapter reads (defaults as in the public configuration)."""

    vocab_size: int = 157184
    hidden_size: int = 2048
    intermediate_size: int = 5120
    num_hidden_layers: int = 20
    num_attention_heads: int = 16
    num_key_value_heads: int = 4
    head_dim: int | None = None
    hidden_act: str = "silu"
    use_qkv_bias: bool = False
    use_qk_norm: bool = True
    use_bias: bool = False
    norm_head: bool = False
    rms_norm_eps: float = 1e-6
    tie_word_embeddings: bool = False
    max_position_embeddings: int = 32768
    rope_theta: float = 600000.0
    rope_scaling: dict[str, Any] | None = None
    partial_rotary_factor: float = 0.5
    num_experts: int | None = 256
    num_shared_experts: int | None = 1
    num_experts_per_tok: int = 8
    n_group: int = 8
    topk_group: int = 4
    routed_scaling_factor: float = 2.5
    moe_intermediate_size: int = 512
    first_k_dense_replace: int = 1
    score_function: str = "sigmoid"
    norm_topk_prob: bool = True
    block_size: int = 32  # the diffusion block (LLaDA2's generate default, block_length)

    @classmethod
    def from_hf(cls, d: dict[str, Any]) -> LLaDA2Config:
        known = {f.name for f in fields(cls)}
        kw = {k: v for k, v in d.items() if k in known}
        if "block_size" not in kw and "block_length" in d:
            kw["block_size"] = d["block_length"]
        cfg = cls(**kw)
        if cfg.hidden_act != "silu":
            raise ValueError(f"llada2_moe: hidden_act {cfg.hidden_act!r} is not supported (silu only)")
        if cfg.norm_head:
            raise ValueError("llada2_moe: norm_head=true is not supported")
        if cfg.rope_scaling and cfg.rope_scaling.get("rope_type", cfg.rope_scaling.get("type")) not in (None, "default"):
            raise ValueError(f"llada2_moe: rope_scaling {cfg.rope_scaling} is not supported")
        return cfg

    @property
    def hd(self) -> int:
        return self.head_dim or self.hidden_size // self.num_attention_heads


class MLP(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(dim, hidden, bias=False)
        self.up_proj = nn.Linear(dim, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Gate(nn.Module):
    expert_bias: Tensor

    def __init__(self, c: LLaDA2Config) -> None:
        super().__init__()
        assert c.num_experts is not None
        self.c = c
        self.weight = nn.Parameter(torch.empty(c.num_experts, c.hidden_size))
        self.register_buffer("expert_bias", torch.zeros(c.num_experts))

    def forward(self, h: Tensor) -> tuple[Tensor, Tensor]:
        """h [N, D] -> expert ids [N, k] and their weights [N, k] (fp32)."""
        c = self.c
        logits = F.linear(h.float(), self.weight.float())
        scores = torch.sigmoid(logits) if c.score_function == "sigmoid" else logits.softmax(-1)
        choice = scores + self.expert_bias.float()
        n, e = choice.shape
        if c.n_group > 1 and c.topk_group < c.n_group:
            grouped = choice.view(n, c.n_group, e // c.n_group)
            gscore = grouped.topk(min(2, e // c.n_group), dim=-1).values.sum(-1)
            keep = torch.zeros_like(gscore, dtype=torch.bool)
            keep.scatter_(1, gscore.topk(c.topk_group, dim=-1).indices, True)
            choice = choice.masked_fill(~keep.repeat_interleave(e // c.n_group, dim=1), float("-inf"))
        idx = choice.topk(c.num_experts_per_tok, dim=-1).indices
        w = scores.gather(1, idx)
        if c.norm_topk_prob and c.num_experts_per_tok > 1:
            w = w / (w.sum(-1, keepdim=True) + 1e-20)
        return idx, w * c.routed_scaling_factor


MOE_IMPLS = ("auto", "triton", "grouped", "reference", "loop")


class SparseMoe(nn.Module):
    """Routed experts plus the shared expert. The checkpoint's per-expert modules stay (their
    names load as they are); for compute their weights live stacked, `w13` [E, 2I, D] (gate
    rows over up rows) and `w2` [E, D, I], with every expert's parameters views into them
    (built once by `stack_experts`, again whenever the parameters were replaced or moved).

    `impl` picks the expert compute: "auto" (`kernels.moe_experts`: Triton on CUDA, grouped
    GEMMs elsewhere), one of its backends by name, or "loop": the original per-expert loop,
    which reads the routing back to the host every layer (kept as the bench's baseline)."""

    impl: str = "auto"

    def __init__(self, c: LLaDA2Config) -> None:
        super().__init__()
        assert c.num_experts is not None
        self.experts = nn.ModuleList(MLP(c.hidden_size, c.moe_intermediate_size) for _ in range(c.num_experts))
        self.gate = Gate(c)
        self.shared_experts = (MLP(c.hidden_size, c.moe_intermediate_size * c.num_shared_experts)
                               if c.num_shared_experts else None)
        self._stack: tuple[Tensor, Tensor] | None = None

    def _stack_current(self) -> bool:
        if self._stack is None:
            return False
        w13, w2 = self._stack
        mods = self.expert_mlps()
        inter = w13.shape[1] // 2
        return all(mods[e].gate_proj.weight.data_ptr() == w13[e].data_ptr()
                   and mods[e].up_proj.weight.data_ptr() == w13[e, inter:].data_ptr()
                   and mods[e].down_proj.weight.data_ptr() == w2[e].data_ptr()
                   for e in (0, len(mods) - 1))  # a cheap check: the ends still view the stack

    def expert_mlps(self) -> list[MLP]:
        return [m for m in self.experts if isinstance(m, MLP)]

    @torch.no_grad()
    def stack_experts(self) -> tuple[Tensor, Tensor]:
        """(w13, w2), stacking the experts' weights first unless they are stacked already."""
        if self._stack_current():
            assert self._stack is not None
            return self._stack
        with torch.inference_mode(False):  # plain tensors, usable outside inference mode
            mods = self.expert_mlps()
            w13 = torch.stack([torch.cat([m.gate_proj.weight, m.up_proj.weight]) for m in mods])
            w2 = torch.stack([m.down_proj.weight for m in mods])
            inter = w13.shape[1] // 2
            for e, m in enumerate(mods):  # the checkpoint's names now view the stack
                m.gate_proj.weight = nn.Parameter(w13[e, :inter], requires_grad=False)
                m.up_proj.weight = nn.Parameter(w13[e, inter:], requires_grad=False)
                m.down_proj.weight = nn.Parameter(w2[e], requires_grad=False)
        self._stack = (w13, w2)
        return self._stack

    def forward(self, x: Tensor) -> Tensor:
        shape = x.shape
        h = x.reshape(-1, shape[-1])
        idx, w = self.gate(h)
        if self.impl == "loop":
            out = self.loop_experts(h, idx, w)
        else:
            w13, w2 = self.stack_experts()
            out = kernels.moe_experts(h, w13, w2, idx, w, backend=None if self.impl == "auto" else self.impl)
        y = out.to(x.dtype).view(shape)
        return y + self.shared_experts(x) if self.shared_experts is not None else y

    def loop_experts(self, h: Tensor, idx: Tensor, w: Tensor) -> Tensor:
        """The reference loop: one matmul per chosen expert, the routing read on the host."""
        out = torch.zeros(h.shape, dtype=torch.float32, device=h.device)
        flat = idx.flatten()
        order = flat.argsort(stable=True)
        counts = torch.bincount(flat, minlength=len(self.experts)).tolist()
        token = order // idx.shape[1]
        weight = w.flatten()[order]
        start = 0
        for e, n in enumerate(counts):  # only the experts some token chose
            if n:
                t = token[start:start + n]
                y = self.experts[e](h[t])
                out.index_add_(0, t, y.float() * weight[start:start + n, None])
                start += n
        return out


def set_moe_impl(model: nn.Module, impl: str) -> None:
    """Pick the expert compute of every MoE layer of `model` (see `SparseMoe.impl`)."""
    if impl not in MOE_IMPLS:
        raise ValueError(f"moe impl {impl!r}: expected one of {', '.join(MOE_IMPLS)}")
    for m in model.modules():
        if isinstance(m, SparseMoe):
            m.impl = impl


class Attention(nn.Module):
    def __init__(self, c: LLaDA2Config) -> None:
        super().__init__()
        self.c = c
        hd = c.hd
        self.query_key_value = nn.Linear(c.hidden_size, (c.num_attention_heads + 2 * c.num_key_value_heads) * hd,
                                         bias=c.use_qkv_bias)
        if c.use_qk_norm:
            self.query_layernorm = RMSNorm(hd, c.rms_norm_eps)
            self.key_layernorm = RMSNorm(hd, c.rms_norm_eps)
        self.dense = nn.Linear(c.num_attention_heads * hd, c.hidden_size, bias=c.use_bias)
        self.kv_cache: KVCache | None = None

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, mask: Tensor | None, cache_at: CacheAt) -> Tensor:
        c, (B, T, _) = self.c, x.shape
        H, Hkv = c.num_attention_heads, c.num_key_value_heads
        q, k, v = self.query_key_value(x).view(B, T, H + 2 * Hkv, c.hd).split([H, Hkv, Hkv], dim=2)
        if c.use_qk_norm:
            q, k = self.query_layernorm(q), self.key_layernorm(k)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        return self.dense(attend(q, k, v, mask, self.kv_cache, cache_at))


class DecoderLayer(nn.Module):
    def __init__(self, c: LLaDA2Config, i: int) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.attention = Attention(c)
        self.post_attention_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        moe = c.num_experts is not None and i >= c.first_k_dense_replace
        self.mlp: nn.Module = SparseMoe(c) if moe else MLP(c.hidden_size, c.intermediate_size)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, mask: Tensor | None, cache_at: CacheAt) -> Tensor:
        x = x + self.attention(self.input_layernorm(x), cos, sin, mask, cache_at)
        return x + self.mlp(self.post_attention_layernorm(x))


class Backbone(nn.Module):
    def __init__(self, c: LLaDA2Config) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(c.vocab_size, c.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(c, i) for i in range(c.num_hidden_layers))
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps)


class LLaDA2Model(AdapterModel):
    optional_buffers = ("expert_bias",)
    aligned_blocks = True  # diffusion blocks sit at multiples of block_size, prompt included

    def __init__(self, c: LLaDA2Config, special: SpecialTokens) -> None:
        super().__init__()
        self.args = c
        self.model = Backbone(c)
        self.lm_head = nn.Linear(c.hidden_size, c.vocab_size, bias=False)
        if c.tie_word_embeddings:
            self.lm_head.weight = self.model.word_embeddings.weight
        self.rope = Rope(int(c.hd * c.partial_rotary_factor), c.rope_theta)
        self.cache_batch = 0
        self.config = ModelConfig(
            vocab_size=c.vocab_size, n_layer=c.num_hidden_layers, n_head=c.num_attention_heads,
            n_kv_head=c.num_key_value_heads, dim=c.hidden_size, intermediate_size=c.intermediate_size,
            rope_base=c.rope_theta, norm_eps=c.rms_norm_eps, max_seq_len=c.max_position_embeddings,
            block_size=c.block_size, attention="block_causal", shift_logits=False,
            tie_embeddings=c.tie_word_embeddings, special=special)

    def embed(self, idx: Tensor) -> Tensor:
        return self.model.word_embeddings(idx)

    def decoder_layers(self) -> nn.ModuleList:
        return self.model.layers

    def final(self, x: Tensor) -> Tensor:
        return self.lm_head(self.model.norm(x))

    def head_dims(self) -> tuple[int, int]:
        return self.args.num_key_value_heads, self.args.hd

    @property
    def output(self) -> nn.Module:
        return self.lm_head

    def tie_weights(self) -> None:
        if self.args.tie_word_embeddings:
            self.lm_head.weight = self.model.word_embeddings.weight
        self.stack_experts()  # the loader calls this once every tensor is assigned

    def stack_experts(self) -> None:
        """Stack every MoE layer's expert weights (`SparseMoe.stack_experts`); layers with
        weights still on the meta device (a checkpoint lacking some) are left alone."""
        for m in self.modules():
            if isinstance(m, SparseMoe) and not any(p.is_meta for p in m.experts.parameters()):
                m.stack_experts()


def build(hf: dict[str, Any], special: SpecialTokens) -> LLaDA2Model:
    return LLaDA2Model(LLaDA2Config.from_hf(hf), special)
