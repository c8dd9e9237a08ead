"""Tiny random checkpoints in the public layouts of LLaDA2.x, LLaDA-8B and Dream.

Config keys are spelled out here from the published configs, tensor names in
tests/fakes/ckpt_writers.py from the published modeling code, independently of the adapters,
so a naming mistake in an adapter fails to load.
Special tokens: ids 90.. of a 96-token vocabulary; LLaDA2's mask id comes only from the
tokenizer files (its config has no mask_token_id), the others' from config.json.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from tests.fakes.ckpt_writers import (  # noqa: F401  (checkpoint_shapes: re-exported to the tests)
    CODE_CHARS,
    CODE_WORDS,
    checkpoint_shapes,
    random_weight,
    save_code_tokenizer,
)
from tests.fakes.published import LLADA2_CHAT_TEMPLATE  # noqa: F401  (re-exported to the tests)

VOCAB, MASK, EOS, PAD = 96, 90, 91, 92
SPECIALS = {MASK: "<|mask|>", EOS: "<|endoftext|>", PAD: "<|pad|>"}


def _tokenizer(out: Path, mask_role: bool) -> None:
    added = [{"id": i, "content": c, "special": True} for i, c in SPECIALS.items()]
    (out / "tokenizer.json").write_text(json.dumps({"version": "1.0", "added_tokens": added}))
    tc = {"eos_token": "<|endoftext|>", "pad_token": "<|pad|>"}
    if mask_role:
        tc["mask_token"] = "<|mask|>"
    (out / "tokenizer_config.json").write_text(json.dumps(tc))


def _save(out: Path, cfg: dict, shapes: dict[str, tuple[int, ...]], seed: int, shards: int = 1) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(cfg, indent=1))
    g = torch.Generator().manual_seed(seed)
    state = {name: random_weight(name, shape, g).to(torch.bfloat16) for name, shape in shapes.items()}
    names = sorted(state)
    if shards == 1:
        save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    else:
        weight_map = {}
        for k in range(shards):
            part = names[k::shards]
            fname = f"model-{k + 1:05d}-of-{shards:05d}.safetensors"
            save_file({n: state[n] for n in part}, str(out / fname), metadata={"format": "pt"})
            weight_map.update({n: fname for n in part})
        (out / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    return out


def _write(out: Path, family: str, cfg: dict, seed: int, shards: int = 1) -> Path:
    """A checkpoint of `family` with config `cfg`: random weights (`seed`) in `shards` files and the
    tiny tokenizer (the mask token has a role of its own in LLaDA2's)."""
    _save(out, cfg, checkpoint_shapes(family, cfg), seed, shards)
    _tokenizer(out, mask_role=family == "llada2")
    return out


def llada2_config(**keys: Any) -> dict[str, Any]:
    """`write_llada2`'s config.json keys (LLaDA2.0-mini's, sizes shrunk) with `keys` replaced."""
    D, H, KV, HD, L, FF, E, MI = 32, 4, 2, 16, 3, 64, 8, 16
    return {
        "architectures": ["LLaDA2MoeModelLM"], "model_type": "llada2_moe", "vocab_size": VOCAB,
        "hidden_size": D, "intermediate_size": FF, "num_hidden_layers": L, "num_attention_heads": H,
        "num_key_value_heads": KV, "head_dim": HD, "hidden_act": "silu", "use_qkv_bias": False,
        "use_qk_norm": True, "use_bias": False, "norm_head": False, "rms_norm_eps": 1e-6,
        "tie_word_embeddings": False, "max_position_embeddings": 512, "rope_theta": 600000,
        "rope_scaling": None, "partial_rotary_factor": 0.5, "num_experts": E, "num_shared_experts": 1,
        "num_experts_per_tok": 2, "n_group": 4, "topk_group": 2, "routed_scaling_factor": 2.5,
        "moe_intermediate_size": MI, "first_k_dense_replace": 1, "score_function": "sigmoid",
        "norm_topk_prob": True, "moe_router_enable_expert_bias": True, "pad_token_id": PAD,
    } | keys


def write_llada2(out: Path, seed: int = 0, shards: int = 2) -> Path:
    cfg = llada2_config(output_router_logits=False, dtype="bfloat16")
    return _write(out, "llada2", cfg, seed, shards)


def llada_config(**keys: Any) -> dict[str, Any]:
    """`write_llada`'s config.json keys (LLaDA-8B's, sizes shrunk) with `keys` replaced."""
    D, H, L, FF = 32, 4, 2, 64
    return {
        "architectures": ["LLaDAModelLM"], "model_type": "llada", "activation_type": "silu",
        "alibi": False, "attention_layer_norm": False, "block_type": "llama", "d_model": D,
        "embedding_size": VOCAB, "vocab_size": VOCAB, "eos_token_id": EOS, "pad_token_id": EOS,
        "mask_token_id": MASK, "include_bias": False, "include_qkv_bias": False, "layer_norm_type": "rms",
        "max_sequence_length": 512, "mlp_hidden_size": FF, "mlp_ratio": 2, "n_heads": H, "n_kv_heads": H,
        "n_layers": L, "rms_norm_eps": 1e-5, "rope": True, "rope_full_precision": True, "rope_theta": 500000.0,
        "scale_logits": False, "weight_tying": False, "flash_attention": False, "use_cache": False,
    } | keys


def write_llada(out: Path, seed: int = 1) -> Path:
    cfg = llada_config()
    return _write(out, "llada", cfg, seed)


def dream_config(**keys: Any) -> dict[str, Any]:
    """`write_dream`'s config.json keys (Dream-v0-7B's, sizes shrunk) with `keys` replaced."""
    D, H, KV, L, FF = 32, 4, 2, 2, 64
    return {
        "architectures": ["DreamModel"], "model_type": "Dream", "hidden_act": "silu", "hidden_size": D,
        "intermediate_size": FF, "num_attention_heads": H, "num_key_value_heads": KV, "num_hidden_layers": L,
        "max_position_embeddings": 512, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "rope_scaling": None,
        "tie_word_embeddings": False, "vocab_size": VOCAB, "mask_token_id": MASK, "pad_token_id": PAD,
        "bos_token_id": EOS, "eos_token_id": EOS, "use_sliding_window": False, "attention_dropout": 0.0,
    } | keys


def write_dream(out: Path, seed: int = 2) -> Path:
    cfg = dream_config()
    return _write(out, "dream", cfg, seed)


def prompt_ids(n: int, seed: int = 0) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(5, 80, (n,), generator=g).tolist()


# -- a chat checkpoint: LLaDA2's template structure over a small code vocabulary -----------------
# The tokenizer puts its special tokens at the end of the vocabulary (ids 90..95), as LLaDA2
# (mask 156895 of 157184), LLaDA-8B and Dream do. A few whole words give token healing
# something to extend ("ret" -> "return").
ROLE_END, ROLE_OPEN, ROLE_CLOSE = 93, 94, 95
CODE_SPECIALS = {MASK: "<|mask|>", EOS: "<|endoftext|>", PAD: "<|pad|>", ROLE_END: "<|role_end|>",
                 ROLE_OPEN: "<role>", ROLE_CLOSE: "</role>"}
def write_code_tokenizer(out: Path) -> Path:
    """Characters and a few words (ids 0..89), the specials of CODE_SPECIALS at the end (90..95)."""
    vocab = {c: i for i, c in enumerate(CODE_CHARS)}
    vocab["<unk>"] = len(vocab)
    for w in CODE_WORDS:
        vocab[w] = len(vocab)
    assert len(vocab) == min(CODE_SPECIALS)
    vocab |= {t: i for i, t in CODE_SPECIALS.items()}
    save_code_tokenizer(out, vocab, CODE_SPECIALS)
    return out


def write_llada2_chat(out: Path, seed: int = 0, context: int = 2048) -> Path:
    """The tiny LLaDA2 checkpoint (same weights as `write_llada2`) with LLaDA2's chat template,
    the code tokenizer and a context of `context` positions."""
    write_llada2(out, seed)
    cfg = json.loads((out / "config.json").read_text())
    (out / "config.json").write_text(json.dumps(cfg | {"max_position_embeddings": context}, indent=1))
    write_code_tokenizer(out)
    tc = {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>", "pad_token": "<|pad|>",
          "mask_token": "<|mask|>", "chat_template": LLADA2_CHAT_TEMPLATE}
    (out / "tokenizer_config.json").write_text(json.dumps(tc))
    return out


# -- parity variants: the options the first checkpoints leave at their defaults --------------------
# Read by tests/engine/model/adapters/test_parity.py. Each spells out its config from the published ones; its
# tensors are named by `checkpoint_shapes`, as above (tied heads omit the head tensor).
def write_llada2_variant(out: Path, seed: int = 3) -> Path:
    """Tied embeddings, q/k/v and output biases, an explicit head_dim != hidden/heads, partial
    rotary over 6 of 12 channels, 3 groups of which 1 is kept, 3 experts per token, 2 shared
    experts, 2 dense layers, a scaling factor other than LLaDA2's."""
    cfg = llada2_config(
        intermediate_size=48, num_hidden_layers=4, num_key_value_heads=1, head_dim=12, use_qkv_bias=True,
        use_bias=True, rms_norm_eps=1e-5, tie_word_embeddings=True, rope_theta=10000.0, num_experts=12,
        num_shared_experts=2, num_experts_per_tok=3, n_group=3, topk_group=1, routed_scaling_factor=1.7,
        moe_intermediate_size=8, first_k_dense_replace=2)
    return _write(out, "llada2", cfg, seed)


def write_llada_variant(out: Path, seed: int = 4) -> Path:
    """Grouped-query attention (6 heads over 2), q/k/v biases, an embedding wider than the
    vocabulary, scaled input embeddings, a tied head and scaled logits."""
    cfg = llada_config(
        d_model=48, embedding_size=128, include_qkv_bias=True, mlp_hidden_size=40, n_heads=6, n_kv_heads=2,
        rope_theta=10000.0, scale_logits=True, weight_tying=True, input_emb_norm=True, block_group_size=1)
    return _write(out, "llada", cfg, seed)


def write_dream_variant(out: Path, seed: int = 5) -> Path:
    """Dream with a tied head and one key/value head for four query heads."""
    cfg = dream_config(num_key_value_heads=1, intermediate_size=48, rope_theta=10000.0, tie_word_embeddings=True)
    return _write(out, "dream", cfg, seed)


def never_predict_mask(out: Path) -> Path:
    """Zero the output row of the mask id (the embedding row when the head is tied), so the
    checkpoint, like a trained model, never ranks [MASK] first: its logit is 0 while the best
    of the other 95 is positive. Decoding comparisons need it, since the published loops
    leave a position whose argmax is [MASK] masked, where a committed token would stay."""
    files = sorted(out.glob("*.safetensors"))
    names = {n for f in files for n in load_file(str(f))}
    head = "lm_head.weight" if "lm_head.weight" in names else next(
        n for n in sorted(names) if n.endswith(("word_embeddings.weight", "embed_tokens.weight", "wte.weight")))
    for f in files:
        state = load_file(str(f))
        if head in state:
            state[head][MASK] = 0
            save_file(state, str(f), metadata={"format": "pt"})
    return out
