"""Checkpoint writers that tests and benches share: the tensor names and shapes of each
checkpoint family as its published modeling code names them, random weights for them, the
word-level code tokenizer of the tiny fixtures and a tokenizer of a real checkpoint's size.

Names and shapes are spelled out here from the published configs and modeling code,
independently of the adapters (engine/model/adapters/), so a naming mistake in an adapter
fails to load. Used by tests/engine/model/adapters/ (tiny_ckpts.py), tests/fakes/real_ckpts.py
and bench/real_load.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

CODE_CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 \n\t()[]{}:=+-*/.,_'\"#<>`"
CODE_WORDS = ("def", "ret", "return")


def random_weight(name: str, shape: tuple[int, ...], g: torch.Generator) -> torch.Tensor:
    """A float32 random tensor for the checkpoint tensor `name`, drawn from `g`."""
    if name.endswith(("norm.weight", "layernorm.weight", "q_norm.weight", "k_norm.weight")):
        return 1.0 + 0.1 * torch.randn(shape, generator=g)
    if name.endswith("expert_bias"):
        return 0.05 * torch.randn(shape, generator=g)
    if name.endswith(("embeddings.weight", "wte.weight", "embed_tokens.weight")):
        return torch.randn(shape, generator=g)
    # projections: sharp enough that confidences spread over (0, 1)
    return torch.randn(shape, generator=g) * (1.5 / shape[-1] ** 0.5)


def checkpoint_shapes(family: str, c: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    """Tensor name -> shape of a `family` ("llada2", "llada", "dream", "llada_moe") checkpoint with config.json
    `c`, as the published modeling code names them (tied heads omit the head tensor, as tied
    checkpoints do). The order is the writers' draw order."""
    if family == "llada2":
        return _llada2_shapes(c)
    if family == "llada":
        return _llada_shapes(c)
    if family == "llada_moe":
        return _llada_moe_shapes(c)
    return _dream_shapes(c)


def _llada_moe_shapes(c: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    D, V, H, KV = c["hidden_size"], c["vocab_size"], c["num_attention_heads"], c["num_key_value_heads"]
    hd, E, EI = D // H, c["num_experts"], c["expert_intermediate_size"]
    freq = c.get("moe_layer_freq") or [1] * c["num_hidden_layers"]
    s: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (V, D), "model.norm.weight": (D,)}
    if not c.get("tie_word_embeddings", False):
        s["lm_head.weight"] = (V, D)
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        s |= {p + "input_layernorm.weight": (D,), p + "post_attention_layernorm.weight": (D,),
              p + "self_attn.q_proj.weight": (H * hd, D), p + "self_attn.k_proj.weight": (KV * hd, D),
              p + "self_attn.v_proj.weight": (KV * hd, D), p + "self_attn.o_proj.weight": (D, H * hd)}
        if c.get("attention_bias"):
            s |= {p + "self_attn.q_proj.bias": (H * hd,), p + "self_attn.k_proj.bias": (KV * hd,),
                  p + "self_attn.v_proj.bias": (KV * hd,), p + "self_attn.o_proj.bias": (D,)}
        if c.get("qk_layernorm", True):
            s |= {p + "self_attn.q_norm.weight": (hd,), p + "self_attn.k_norm.weight": (hd,)}
        if not freq[i]:
            FF = c["dense_intermediate_size"]
            s |= {p + "mlp.gate_proj.weight": (FF, D), p + "mlp.up_proj.weight": (FF, D), p + "mlp.down_proj.weight": (D, FF)}
            continue
        s[p + "mlp.gate.weight"] = (E, D)
        if c.get("moe_router_enable_expert_bias"):
            s[p + "mlp.expert_bias"] = (E,)
        for e in range(E):
            q = p + f"mlp.experts.{e}."
            s |= {q + "gate_proj.weight": (EI, D), q + "up_proj.weight": (EI, D), q + "down_proj.weight": (D, EI)}
        if c.get("shared_expert_intermediate_size"):
            SI = c["shared_expert_intermediate_size"]
            s |= {p + "shared_expert.gate_proj.weight": (SI, D), p + "shared_expert.up_proj.weight": (SI, D),
                  p + "shared_expert.down_proj.weight": (D, SI)}
    return s


def _llada2_shapes(c: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    D, H, KV, HD, V = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"], c["vocab_size"]
    FF, MI, E = c["intermediate_size"], c["moe_intermediate_size"], c["num_experts"]
    s: dict[str, tuple[int, ...]] = {"model.word_embeddings.weight": (V, D), "model.norm.weight": (D,)}
    if not c.get("tie_word_embeddings", False):
        s["lm_head.weight"] = (V, D)
    qkv = (H + 2 * KV) * HD
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        s |= {p + "input_layernorm.weight": (D,), p + "post_attention_layernorm.weight": (D,),
              p + "attention.query_key_value.weight": (qkv, D)}
        if c.get("use_qkv_bias", False):
            s[p + "attention.query_key_value.bias"] = (qkv,)
        s |= {p + "attention.query_layernorm.weight": (HD,), p + "attention.key_layernorm.weight": (HD,),
              p + "attention.dense.weight": (D, H * HD)}
        if c.get("use_bias", False):
            s[p + "attention.dense.bias"] = (D,)
        if i < c["first_k_dense_replace"]:
            s |= {p + "mlp.gate_proj.weight": (FF, D), p + "mlp.up_proj.weight": (FF, D), p + "mlp.down_proj.weight": (D, FF)}
            continue
        s |= {p + "mlp.gate.weight": (E, D), p + "mlp.gate.expert_bias": (E,)}
        for e, mi in [*((f"experts.{j}", MI) for j in range(E)), ("shared_experts", MI * c["num_shared_experts"])]:
            s |= {p + f"mlp.{e}.gate_proj.weight": (mi, D), p + f"mlp.{e}.up_proj.weight": (mi, D),
                  p + f"mlp.{e}.down_proj.weight": (D, mi)}
    return s


def _llada_shapes(c: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    D, FF, V = c["d_model"], c["mlp_hidden_size"], c.get("embedding_size") or c["vocab_size"]
    kv = D // c["n_heads"] * (c.get("n_kv_heads") or c["n_heads"])
    qkv_bias = c.get("include_bias", False) or c.get("include_qkv_bias", False)
    s: dict[str, tuple[int, ...]] = {"model.transformer.wte.weight": (V, D), "model.transformer.ln_f.weight": (D,)}
    if not c.get("weight_tying", False):
        s["model.transformer.ff_out.weight"] = (V, D)
    for i in range(c["n_layers"]):
        p = f"model.transformer.blocks.{i}."
        s |= {p + "attn_norm.weight": (D,), p + "ff_norm.weight": (D,)}
        for proj, rows in (("q_proj", D), ("k_proj", kv), ("v_proj", kv)):
            s[p + proj + ".weight"] = (rows, D)
            if qkv_bias:
                s[p + proj + ".bias"] = (rows,)
        s |= {p + "attn_out.weight": (D, D), p + "ff_proj.weight": (FF, D), p + "up_proj.weight": (FF, D),
              p + "ff_out.weight": (D, FF)}
    return s


def _dream_shapes(c: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    D, FF, V, H, KV = c["hidden_size"], c["intermediate_size"], c["vocab_size"], c["num_attention_heads"], c["num_key_value_heads"]
    hd = D // H
    s: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (V, D), "model.norm.weight": (D,)}
    if not c.get("tie_word_embeddings", False):
        s["lm_head.weight"] = (V, D)
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        s |= {p + "input_layernorm.weight": (D,), p + "post_attention_layernorm.weight": (D,),
              p + "self_attn.q_proj.weight": (H * hd, D), p + "self_attn.q_proj.bias": (H * hd,),
              p + "self_attn.k_proj.weight": (KV * hd, D), p + "self_attn.k_proj.bias": (KV * hd,),
              p + "self_attn.v_proj.weight": (KV * hd, D), p + "self_attn.v_proj.bias": (KV * hd,),
              p + "self_attn.o_proj.weight": (D, H * hd), p + "mlp.gate_proj.weight": (FF, D),
              p + "mlp.up_proj.weight": (FF, D), p + "mlp.down_proj.weight": (D, FF)}
    return s




def save_code_tokenizer(out: Path, vocab: dict[str, int], special: dict[int, str],
                        plain: dict[int, str] | None = None) -> None:
    """tokenizer.json of a word-level tokenizer over `vocab` (characters, "<unk>" and CODE_WORDS
    at its low ids) that splits text into CODE_WORDS and single characters; `special`: the
    special tokens {id: text}, also in `vocab`."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    words = "|".join(sorted(CODE_WORDS, key=len, reverse=True))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(f"{words}|[\\s\\S]"), behavior="isolated")
    tok.decoder = decoders.Fuse()
    tok.add_special_tokens([special[i] for i in sorted(special)])
    if plain:  # added tokens that are not special (Qwen2.5's FIM and tool-call tokens)
        from tokenizers import AddedToken

        tok.add_tokens([AddedToken(plain[i], special=False, normalized=False) for i in sorted(plain)])
    tok.save(str(out / "tokenizer.json"))




def write_tokenizer(out: Path, size: int, special: dict[int, str], plain: dict[int, str] | None = None) -> None:
    """tokenizer.json of `size` tokens: the code tokenizer's characters and words at the low ids,
    unused filler entries up to `size`, and the added tokens `special` and `plain` (not special)
    ({id: text}) at their ids."""
    low = [*CODE_CHARS, "<unk>", *CODE_WORDS]
    added = special | (plain or {})
    vocab = {t: i for i, t in enumerate(low)}
    for i in range(len(low), size):
        vocab[added.get(i, f"<unused_{i}>")] = i
    save_code_tokenizer(out, vocab, special, plain)


def write_sharded(out: Path, shapes: dict[str, tuple[int, ...]], seed: int, shards: int = 2,
                  dtype: torch.dtype = torch.bfloat16) -> None:
    """Random weights in `shards` safetensors files plus model.safetensors.index.json."""
    g = torch.Generator().manual_seed(seed)
    names = sorted(shapes)
    weight_map: dict[str, str] = {}
    total = 0
    for k in range(shards):
        part: dict[str, torch.Tensor] = {}
        for n in names[k::shards]:
            part[n] = random_weight(n, shapes[n], g).to(dtype)
            total += part[n].numel() * part[n].element_size()
        fname = f"model-{k + 1:05d}-of-{shards:05d}.safetensors"
        save_file(part, str(out / fname), metadata={"format": "pt"})
        weight_map |= {n: fname for n in part}
    (out / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=1))
