"""Checkpoints that look like the real ones: the published config.json (tests/fakes/published.py)
with only depth and width changed, a tokenizer with the real token count (fewer tokens than
embedding rows, as every real checkpoint has), the real special ids at their real places, the
chat template and generation_config.json, and bf16 weights in two shards with
model.safetensors.index.json.

The tokenizer is not the real one (no public GitHub repository carries LLaDA2's, LLaDA-8B's or
Dream's tokenizer.json): characters and three words ("def", "ret", "return") at the low ids,
unused filler entries up to the real size, the real special tokens at their real ids. The
weights are random (seeded). `fixture(name)` writes once per source version into a cache
directory under the system temp dir (about 20 MB each; a second session reuses it).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from tests.fakes import published as pub
from tests.fakes.ckpt_writers import checkpoint_shapes, write_sharded, write_tokenizer

NAMES = ("llada2-mini", "llada2.2-mini", "llada-8b-base", "llada-8b-instruct", "llada-1.5", "dream-base", "dream-instruct",
         "dream-coder-instruct", "diffucoder-instruct", "llada-moe-instruct")

SHRINK: dict[str, dict[str, Any]] = {
    "llada2": {"num_hidden_layers": 2, "hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 4,
               "num_key_value_heads": 2, "head_dim": 16, "moe_intermediate_size": 16, "num_experts": 16},
    "llada": {"n_layers": 2, "d_model": 32, "n_heads": 4, "n_kv_heads": 4, "mlp_hidden_size": 64},
    "llada_moe": {"num_hidden_layers": 2, "hidden_size": 32, "dense_intermediate_size": 64, "expert_intermediate_size": 16,
                  "num_attention_heads": 4, "num_key_value_heads": 4, "num_experts": 16, "moe_layer_freq": [0, 1]},
    "dream": {"num_hidden_layers": 2, "hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 4,
              "num_key_value_heads": 2, "max_window_layers": 2},
}


def _spec(name: str) -> dict[str, Any]:
    """family, published config, tokenizer size, added tokens {id: text} (special, and `plain`: not
    special), roles, template, generation config."""
    if name == "llada-moe-instruct":  # LLaDA2's tokenizer and chat template
        sp = {156891: "<|startoftext|>", 156892: "<|endoftext|>", 156895: "<|mask|>", 156900: "<|role_end|>",
              157151: "<role>", 157152: "</role>"}
        roles = {"bos_token": "<|startoftext|>", "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>",
                 "mask_token": "<|mask|>"}
        return {"family": "llada_moe", "config": pub.LLADA_MOE_7B, "tokens": 157153, "special": sp, "roles": roles,
                "template": pub.LLADA2_CHAT_TEMPLATE, "generation": {"eos_token_id": 156892, "pad_token_id": 156892}}
    if name in ("llada2-mini", "llada2.2-mini"):
        sp = {156891: "<|startoftext|>", 156892: "<|endoftext|>", 156895: "<|mask|>", 156900: "<|role_end|>",
              157151: "<role>", 157152: "</role>"}
        if name == "llada2.2-mini":
            sp |= {156930: "<|delete|>", 156931: "<|insert|>"}
        roles = {"bos_token": "<|startoftext|>", "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>",
                 "mask_token": "<|mask|>"}
        return {"family": "llada2", "config": pub.LLADA22_MINI if name == "llada2.2-mini" else pub.LLADA2_MINI,
                "tokens": 157153, "special": sp, "roles": roles,
                "template": pub.LLADA2_CHAT_TEMPLATE, "generation": {"eos_token_id": 156892, "pad_token_id": 156892}}
    if name.startswith("llada-8b") or name == "llada-1.5":
        sp = {126080: "<|startoftext|>", 126081: "<|endoftext|>", 126336: "<|mdm_mask|>",
              126346: "<|start_header_id|>", 126347: "<|end_header_id|>", 126348: "<|eot_id|>"}
        roles = {"bos_token": "<|startoftext|>", "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>"}
        return {"family": "llada", "config": pub.LLADA_8B, "tokens": 126349, "special": sp, "roles": roles,
                "template": None if name.endswith("base") else pub.LLADA_8B_TEMPLATE,
                "generation": {"bos_token_id": 126080, "eos_token_id": 126081, "pad_token_id": 126081}}
    added = pub.DIFFUCODER_ADDED if name == "diffucoder-instruct" else pub.DREAM_ADDED
    sp = {i: t for i, (t, special) in added.items() if special}
    plain = {i: t for i, (t, special) in added.items() if not special}
    roles = {"bos_token": "<|beginoftext|>", "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>",
             "mask_token": "<|mask|>"}
    if name == "diffucoder-instruct":
        roles["pad_token"] = "<|dlm_pad|>"
    return {"family": "dream", "config": pub.DREAM_7B, "tokens": max(added) + 1, "special": sp, "plain": plain,
            "roles": roles, "template": pub.DREAM_TEMPLATE if name.endswith("instruct") else None,
            "generation": {"bos_token_id": 151643, "eos_token_id": 151643, "pad_token_id": 151643}}


def config_of(name: str) -> dict[str, Any]:
    s = _spec(name)
    shrink = SHRINK[s["family"]]
    if "expert_capacity" in s["config"]:  # block routing: the capacity (48) needs the published 256 experts
        shrink = {k: v for k, v in shrink.items() if k != "num_experts"} | {"moe_intermediate_size": 8}
    return s["config"] | shrink


def write(name: str, out: Path, seed: int = 0) -> Path:
    s = _spec(name)
    out.mkdir(parents=True, exist_ok=True)
    cfg = config_of(name)
    (out / "config.json").write_text(json.dumps(cfg, indent=1))
    (out / "generation_config.json").write_text(json.dumps(s["generation"], indent=1))
    plain = s.get("plain", {})
    write_tokenizer(out, s["tokens"], s["special"], plain)
    tc: dict[str, Any] = dict(s["roles"])
    added = {i: (t, True) for i, t in s["special"].items()} | {i: (t, False) for i, t in plain.items()}
    tc["added_tokens_decoder"] = {str(i): {"content": t, "special": sp} for i, (t, sp) in sorted(added.items())}
    if s["template"]:
        tc["chat_template"] = s["template"]
    (out / "tokenizer_config.json").write_text(json.dumps(tc, indent=1))
    write_sharded(out, checkpoint_shapes(s["family"], cfg), seed)
    return out


def _version() -> str:
    here = Path(__file__).parent
    src = b"".join((here / f).read_bytes() for f in ("real_ckpts.py", "published.py", "ckpt_writers.py"))
    return hashlib.sha256(src).hexdigest()[:12]


def fixture(name: str) -> Path:
    """The fixture `name` (one of NAMES), written once per source version into a cache dir."""
    root = Path(os.environ.get("LLADA_FIXTURES", Path(tempfile.gettempdir()) / f"llada-lsp-fixtures-{os.getuid()}"))
    done = root / _version() / name
    if (done / "config.json").exists() and (done / "model.safetensors.index.json").exists():
        return done
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=root, prefix=f".{name}-"))
    write(name, tmp)
    done.parent.mkdir(parents=True, exist_ok=True)
    try:
        tmp.rename(done)
    except OSError:  # another session wrote it first
        shutil.rmtree(tmp, ignore_errors=True)
    return done


def published_diff(name: str, written: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """key -> (published, fixture) for every key whose value differs or that only one side has."""
    ref = _spec(name)["config"]
    keys = set(ref) | set(written)
    return {k: (ref.get(k, "<absent>"), written.get(k, "<absent>")) for k in sorted(keys) if ref.get(k, ...) != written.get(k, ...)}
