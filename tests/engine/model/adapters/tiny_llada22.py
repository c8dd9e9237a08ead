"""A tiny LLaDA2.2 checkpoint: the published config values except depth and width.

Kept from the published LLaDA2.2 configuration (docs/models.md, "LLaDA2.2", with each value's
source): model_type llada2_moe, 256 routed experts, 8 per token, 1 shared, block routing
with an expert capacity of 48 per 32-token block, the first layer dense, sigmoid scores with
an expert bias, QK norm, partial rotary over half of each head, rope theta 3e6, a 128K
context (131072 positions), n_group 8 / topk_group 4 still in the config, and the in/del
edit tokens named by `delete_token_id` / `split_token_id`. Shrunk: layers, widths, and the
vocabulary (96 rows: the specials at its end as in the real one; DELETE and INSERT sit just
below them, as ids 88 and 89, where the real ones are 156930 and 156931 after the mask
156895). Weights are random (tests/engine/model/adapters/tiny_ckpts.py's layout and initialisation).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from tests.engine.model.adapters.tiny_ckpts import (
    EOS,
    LLADA2_CHAT_TEMPLATE,
    MASK,
    PAD,
    SPECIALS,
    VOCAB,
    _save,
    checkpoint_shapes,
    llada2_config,
    write_code_tokenizer,
)

DELETE, SPLIT = 88, 89
EDIT_SPECIALS = {DELETE: "<|delete|>", SPLIT: "<|insert|>"}  # token strings: an assumption (docs/models.md)
CAPACITY, ROUTING_BLOCK, EXPERTS, TOP_K = 48, 32, 256, 8


def llada22_config(vocab: int = VOCAB, delete: int = DELETE, split: int = SPLIT, d: int = 32, heads: int = 4,
                   kv: int = 2, head_dim: int = 16, layers: int = 3,
                   ff: int = 64, moe_ff: int = 8) -> dict:
    """LLaDA2.0's keys (`llada2_config`) with LLaDA2.2's published values, its block routing and
    its edit tokens, sizes shrunk."""
    return llada2_config(
        vocab_size=vocab, hidden_size=d, intermediate_size=ff, num_hidden_layers=layers, num_attention_heads=heads,
        num_key_value_heads=kv, head_dim=head_dim, max_position_embeddings=131072, rope_theta=3000000.0,
        num_experts=EXPERTS, num_experts_per_tok=TOP_K, n_group=8, topk_group=4, moe_intermediate_size=moe_ff,
        expert_capacity=CAPACITY, block_size=ROUTING_BLOCK,
        delete_token_id=delete, split_token_id=split, output_router_logits=False, dtype="bfloat16")


def write_llada22(out: Path, seed: int = 7, **shape: int) -> Path:
    cfg = llada22_config(**shape)
    _save(out, cfg, checkpoint_shapes("llada2", cfg), seed, shards=2)
    added = [{"id": i, "content": c, "special": True} for i, c in sorted((SPECIALS | EDIT_SPECIALS).items())]
    (out / "tokenizer.json").write_text(json.dumps({"version": "1.0", "added_tokens": added}))
    (out / "tokenizer_config.json").write_text(json.dumps(
        {"eos_token": SPECIALS[EOS], "pad_token": SPECIALS[PAD], "mask_token": SPECIALS[MASK]}))
    return out


def set_config(out: Path, **keys: object) -> Path:
    """Rewrite config.json with `keys` replaced (a key set to None is removed)."""
    cfg = json.loads((out / "config.json").read_text())
    for k, v in keys.items():
        if v is None:
            cfg.pop(k, None)
        else:
            cfg[k] = v
    (out / "config.json").write_text(json.dumps(cfg, indent=1))
    return out


def edit_head_rows(out: Path, rows: dict[int, tuple[int, float]], zero: tuple[int, ...] = ()) -> Path:
    """Bias the head: row r becomes `scale` times row `src` for each r -> (src, scale) (so r
    outranks src wherever src's logit is positive), and the rows in `zero` become 0 (never the
    argmax of a model whose best logit is positive). Biases a fixture to emit edit tokens."""
    for f in sorted(out.glob("*.safetensors")):
        state = load_file(str(f))
        if "lm_head.weight" in state:
            w = state["lm_head.weight"].float()
            for r, (src, scale) in rows.items():
                w[r] = w[src] * scale
            for r in zero:
                w[r] = 0
            state["lm_head.weight"] = w.to(torch.bfloat16)
            save_file(state, str(f), metadata={"format": "pt"})
    return out


# -- a chat checkpoint: LLaDA2's template over the code tokenizer, plus the two edit tokens --
CHAT_DELETE, CHAT_SPLIT = 96, 97  # appended after the code tokenizer's specials (90..95)


def write_llada22_chat(out: Path, seed: int = 7, context: int = 2048) -> Path:
    """The tiny LLaDA2.2 with LLaDA2's chat template and the code tokenizer (ids 0..95, as
    tests/engine/model/adapters/tiny_ckpts.write_llada2_chat), DELETE and INSERT at 96 and 97 (added special
    tokens), a context of `context` positions."""
    write_llada22(out, seed, vocab=98, delete=CHAT_DELETE, split=CHAT_SPLIT)
    set_config(out, max_position_embeddings=context)
    write_code_tokenizer(out)
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(out / "tokenizer.json"))
    tok.add_special_tokens([EDIT_SPECIALS[DELETE], EDIT_SPECIALS[SPLIT]])
    assert tok.token_to_id(EDIT_SPECIALS[SPLIT]) == CHAT_SPLIT
    tok.save(str(out / "tokenizer.json"))
    tc = {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>", "pad_token": "<|pad|>",
          "mask_token": "<|mask|>", "chat_template": LLADA2_CHAT_TEMPLATE}
    (out / "tokenizer_config.json").write_text(json.dumps(tc))
    return out
