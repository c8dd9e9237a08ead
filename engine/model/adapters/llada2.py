"""LLaDA2.x (model_type "llada2_moe", e.g. LLaDA2.0-mini / LLaDA2.1-mini, 16B MoE), native.

Block-causal masked diffusion: attention is bidirectional inside aligned blocks of 32 and
causal across blocks, over the prompt as well; logits are not shifted (position i predicts
token i). Layers: grouped-query attention on a fused `query_key_value` projection, per-head
RMS QK norm, partial rotary (the first `partial_rotary_factor` of each head), then a dense
SwiGLU MLP for the first `first_k_dense_replace` layers and a mixture of experts after:
sigmoid (or softmax) router scores, plus `expert_bias` for the choice only, group-limited
top-k (the best `topk_group` of `n_group` groups by the sum of their two best scores),
weights renormalised and scaled by `routed_scaling_factor`, plus always-on shared experts.

LLaDA2.2 (a config with `expert_capacity`): block routing. The tokens of one aligned block of
`block_size` positions first pick `expert_capacity` experts (each expert scored by its best
sigmoid + bias score over the block), and each token takes its top-k among those; the group
limit (`n_group`, `topk_group`) is not applied then (docs/models.md, "LLaDA2.2"). A config
may also name its edit tokens (`delete_token_id`, `split_token_id`: the in/del decoder's
DELETE and INSERT, engine.decoding.indel).

Module names follow the public checkpoint (`model.word_embeddings`, `model.layers.N.attention
.query_key_value`, `...mlp.experts.E.gate_proj`, `...mlp.gate.expert_bias`, `lm_head`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

import kernels
from engine.model import native
from engine.model.adapters import common
from engine.model.adapters.common import CacheAt, HeadedModel, RMSNorm, Rope, apply_rope, attend
from engine.model.kv_cache import KVCache
from engine.model.native import SpecialTokens
from kernels.moe_reference import block_allowed, route_groups, topk_lowest

log = logging.getLogger(__name__)

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
    expert_capacity: int | None = None  # LLaDA2.2: experts a block may use (block routing)
    delete_token_id: int | None = None  # LLaDA2.2: the DELETE edit token
    split_token_id: int | None = None  # LLaDA2.2: the INSERT edit token (SPLIT in SGLang)

    @classmethod
    def from_hf(cls, d: dict[str, Any]) -> LLaDA2Config:
        kw = common.known_keys(cls, d)
        if "block_size" not in kw and "block_length" in d:
            kw["block_size"] = d["block_length"]
        cfg = cls(**kw)
        common.check_silu_unscaled("llada2_moe", cfg.hidden_act, cfg.rope_scaling)
        if cfg.norm_head:
            raise ValueError("llada2_moe: norm_head=true is not supported")
        check_llada22_keys(cfg, d)
        return cfg

    @property
    def block_routing(self) -> bool:
        return self.expert_capacity is not None

    @property
    def edit_tokens(self) -> tuple[int, int] | None:
        """(DELETE, INSERT) ids when the config names both, else None."""
        if self.delete_token_id is None or self.split_token_id is None:
            return None
        return self.delete_token_id, self.split_token_id

    @property
    def hd(self) -> int:
        return self.head_dim or self.hidden_size // self.num_attention_heads


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def check_llada22_keys(cfg: LLaDA2Config, d: dict[str, Any]) -> None:
    """Refuse LLaDA2.2 keys this adapter cannot read as they are meant (never misread them)."""
    if d.get("expert_capacity") is not None:
        cap, e, k = d["expert_capacity"], cfg.num_experts, cfg.num_experts_per_tok
        if not _is_int(cap) or e is None or not k <= cap <= e:
            raise ValueError(f"llada2_moe: expert_capacity {cap!r} is not an integer between num_experts_per_tok "
                             f"({k}) and num_experts ({e}): cannot read this block routing")
        if "block_size" not in d and "block_length" not in d:
            raise ValueError("llada2_moe: expert_capacity without block_size: the routing block is unknown")
        if not _is_int(cfg.block_size) or cfg.block_size < 1:
            raise ValueError(f"llada2_moe: block_size {cfg.block_size!r} is not a positive integer")
        if cfg.score_function != "sigmoid":
            raise ValueError(f"llada2_moe: block routing with score_function {cfg.score_function!r} is not "
                             "supported (sigmoid only, as LLaDA2.2 publishes it)")
    ids = {k: d[k] for k in ("delete_token_id", "split_token_id") if k in d and d[k] is not None}
    if len(ids) == 1:
        raise ValueError(f"llada2_moe: {next(iter(ids))} without its pair: in/del decoding needs both "
                         "delete_token_id and split_token_id")
    for name, v in ids.items():
        if not _is_int(v) or not 0 <= v < cfg.vocab_size:
            raise ValueError(f"llada2_moe: {name} {v!r} is not a token id below vocab_size {cfg.vocab_size}")
    if len(ids) == 2 and ids["delete_token_id"] == ids["split_token_id"]:
        raise ValueError("llada2_moe: delete_token_id and split_token_id are the same id")
    if cfg.expert_capacity is not None and not ids:
        log.warning("llada2_moe: a block-routed (LLaDA2.2) config names no delete_token_id / split_token_id: "
                    "decoding without insert/delete, and the model's DELETE/INSERT tokens may show as text; "
                    "add both ids to config.json (SGLang uses 156930 / 156931 for LLaDA2.2-flash)")


class Gate(nn.Module):
    expert_bias: Tensor

    def __init__(self, c: LLaDA2Config) -> None:
        super().__init__()
        assert c.num_experts is not None
        self.c = c
        self.weight = nn.Parameter(torch.empty(c.num_experts, c.hidden_size))
        self.register_buffer("expert_bias", torch.zeros(c.num_experts))

    def forward(self, h: Tensor, groups: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """h [N, D] -> expert ids [N, k] and their weights [N, k] (fp32). Block routing: the
        tokens' groups (`kernels.moe_reference.route_groups`; None: all of h is one block)."""
        c = self.c
        logits = F.linear(h.float(), self.weight.float())
        scores = torch.sigmoid(logits) if c.score_function == "sigmoid" else logits.softmax(-1)
        choice = scores + self.expert_bias.float()
        n, e = choice.shape
        if c.expert_capacity is not None:
            if groups is None:
                groups = torch.zeros(n, dtype=torch.long, device=h.device)
            allowed = block_allowed(choice, groups, c.expert_capacity)
            choice = choice.masked_fill(~allowed, float("-inf"))
        elif c.n_group > 1 and c.topk_group < c.n_group:
            grouped = choice.view(n, c.n_group, e // c.n_group)
            gscore = grouped.topk(min(2, e // c.n_group), dim=-1).values.sum(-1)
            keep = torch.zeros_like(gscore, dtype=torch.bool)
            keep.scatter_(1, gscore.topk(c.topk_group, dim=-1).indices, True)
            choice = choice.masked_fill(~keep.repeat_interleave(e // c.n_group, dim=1), float("-inf"))
        if c.expert_capacity is not None:  # block routing: ties to the lower expert id, as SGLang's
            idx = topk_lowest(choice, c.num_experts_per_tok)
        else:
            idx = choice.topk(c.num_experts_per_tok, dim=-1).indices
        w = scores.gather(1, idx)
        if c.norm_topk_prob and c.num_experts_per_tok > 1:
            w = w / (w.sum(-1, keepdim=True) + 1e-20)
        return idx, w * c.routed_scaling_factor


MOE_IMPLS = (*kernels.BACKENDS, "loop")  # kernels.dispatch's values, and the old loop


class SparseMoe(nn.Module):
    """Routed experts plus the shared expert. The checkpoint's per-expert modules stay (their
    names load as they are); for compute their weights live stacked, `w13` [E, 2I, D] (gate
    rows over up rows) and `w2` [E, D, I], with every expert's parameters views into them
    (built once by `stack_experts`, again whenever the parameters were replaced or moved).

    `impl` picks the expert compute: "auto" (`kernels.moe_experts`: Triton on CUDA, grouped
    GEMMs elsewhere), one of its implementations by name (`kernels.dispatch`: "triton",
    "eager", "reference"), or "loop": the original per-expert loop, which reads the routing
    back to the host every layer (kept as the bench's baseline)."""

    impl: str = "auto"

    def __init__(self, c: LLaDA2Config) -> None:
        super().__init__()
        assert c.num_experts is not None
        self.experts = nn.ModuleList(common.MLP(c.hidden_size, c.moe_intermediate_size) for _ in range(c.num_experts))
        self.gate = Gate(c)
        self.shared_experts = (common.MLP(c.hidden_size, c.moe_intermediate_size * c.num_shared_experts)
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

    def expert_mlps(self) -> list[common.MLP]:
        return [m for m in self.experts if isinstance(m, common.MLP)]

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

    def forward(self, x: Tensor, groups: Tensor | None = None) -> Tensor:
        shape = x.shape
        h = x.reshape(-1, shape[-1])
        idx, w = self.gate(h, groups)
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
        self.mlp: nn.Module = SparseMoe(c) if moe else common.MLP(c.hidden_size, c.intermediate_size)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, mask: Tensor | None, cache_at: CacheAt,
                groups: Tensor | None = None) -> Tensor:
        x = x + self.attention(self.input_layernorm(x), cos, sin, mask, cache_at)
        h = self.post_attention_layernorm(x)
        return x + (self.mlp(h, groups) if isinstance(self.mlp, SparseMoe) else self.mlp(h))


class Backbone(nn.Module):
    def __init__(self, c: LLaDA2Config) -> None:
        super().__init__()
        self.word_embeddings = native.embedding(c.vocab_size, c.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(c, i) for i in range(c.num_hidden_layers))
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps)


class LLaDA2Model(HeadedModel):
    optional_buffers = ("expert_bias",)
    aligned_blocks = True  # diffusion blocks sit at multiples of block_size, prompt included

    def __init__(self, c: LLaDA2Config, special: SpecialTokens) -> None:
        super().__init__()
        self.args = c
        self.model = Backbone(c)
        self.lm_head = nn.Linear(c.hidden_size, c.vocab_size, bias=False)
        self.tie_head()
        self.rope = Rope(int(c.hd * c.partial_rotary_factor), c.rope_theta)
        self.cache_batch = 0
        self.config = self.model_config(attention="block_causal", shift_logits=False, special=special)

    @property
    def edit_tokens(self) -> tuple[int, int] | None:
        """(DELETE, INSERT) ids of a checkpoint trained for in/del editing, else None."""
        return self.args.edit_tokens

    @property
    def routing_block(self) -> int | None:
        """The routing block (`block_size`) of a block-routed (LLaDA2.2) checkpoint, else None:
        the only decoder block it decodes with (engine.decoding.indel.check_routing_block)."""
        return self.args.block_size if self.args.block_routing else None

    def route_groups(self, pos: Tensor) -> Tensor | None:
        """Block routing's token groups for a forward at positions `pos` (None: token routing).
        A block's tokens route together only when fed together: the decoder's block must be
        the routing block (`block_size`), as the aligned LLaDA2 decoder feeds whole blocks."""
        return route_groups(pos, self.args.block_size) if self.args.block_routing else None

    def embedding(self) -> nn.Embedding:
        return self.model.word_embeddings

    def tie_weights(self) -> None:
        self.tie_head()
        self.stack_experts()  # the loader calls this once every tensor is assigned

    def stack_experts(self) -> None:
        """Stack every MoE layer's expert weights (`SparseMoe.stack_experts`); layers with
        weights still on the meta device (a checkpoint lacking some) are left alone."""
        for m in self.modules():
            if isinstance(m, SparseMoe) and not any(p.is_meta for p in m.experts.parameters()):
                m.stack_experts()


def build(hf: dict[str, Any], special: SpecialTokens) -> LLaDA2Model:
    return LLaDA2Model(LLaDA2Config.from_hf(hf), special)
