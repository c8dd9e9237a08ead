"""Load a model for the engine from a local directory or the local Hugging Face cache, offline.

`load_model("inclusionAI/LLaDA2.0-mini")` (or a directory) resolves the checkpoint without
any network access (`HF_HUB_OFFLINE=1`, `local_files_only`), picks the native adapter from
config.json (`engine.model.adapters`), builds it on the meta device and assigns each safetensors
tensor straight onto the target device (`safe_open(device=...)`), one tensor at a time, so
a 16B model never exists twice in memory. Special ids (mask, end of text, pad, FIM markers)
come from config.json, generation_config.json and the tokenizer files, never from literals.

A checkpoint of another architecture runs only with `trust_remote_code=True`, the explicit
opt-in: its own modeling code through transformers, without a KV cache (see RemoteCodeModel).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from torch import Tensor, nn

from engine.model import memory
from engine.model.adapters import find_family, known_model_types
from engine.model.adapters.common import AdapterModel
from engine.model.model_path import ModelNotFoundError, resolve
from engine.model.native import ModelConfig, SpecialTokens

__all__ = ["LoadedModel", "ModelNotFoundError", "default_dtype", "dtype_choice", "generation_end_ids", "load_model", "resolve",
           "resolve_dtype"]

log = logging.getLogger(__name__)

MASK_NAMES = ("<|mask|>", "<|mdm_mask|>", "<mask>", "[MASK]")
FIM_NAMES = {"fim_prefix": ("<|fim_prefix|>", "<fim_prefix>"), "fim_suffix": ("<|fim_suffix|>", "<fim_suffix>"),
             "fim_middle": ("<|fim_middle|>", "<fim_middle>")}
IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)


@dataclass
class LoadedModel:
    model: nn.Module  # the decoder's contract: forward(idx, pos, mask, rows=, ...), setup_cache, config
    path: Path
    tokenizer_path: Path  # directory with tokenizer.json / tokenizer_config.json
    special: SpecialTokens
    family: str  # "embedded", "llada2", "llada", "dream" or "remote"
    cache: str  # "exact" (block-causal), "approximate" (bidirectional) or "none"

    @property
    def config(self) -> ModelConfig:
        return self.model.config  # type: ignore[return-value]


# -- special ids ---------------------------------------------------------------------------
def _json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}


def _first(v: Any) -> int | None:
    if isinstance(v, list):
        return int(v[0]) if v else None
    return int(v) if isinstance(v, int) else None


def _content(v: Any) -> str | None:
    return v.get("content") if isinstance(v, dict) else v if isinstance(v, str) else None


def token_table(path: Path) -> tuple[dict[str, int], dict[str, str]]:
    """(added token text -> id, role -> token text) from the tokenizer files of `path`."""
    ids: dict[str, int] = {}
    for t in _json(path / "tokenizer.json").get("added_tokens", []):
        ids[t["content"]] = int(t["id"])
    tc = _json(path / "tokenizer_config.json")
    for i, t in (tc.get("added_tokens_decoder") or {}).items():
        ids.setdefault(t["content"], int(i))
    roles: dict[str, str] = {}
    for src in (_json(path / "special_tokens_map.json"), tc):
        for role in ("mask_token", "eos_token", "pad_token", "bos_token"):
            c = _content(src.get(role))
            if c:
                roles[role] = c
    return ids, roles


def special_ids(path: Path, config: dict[str, Any], mask_id: int | None = None) -> SpecialTokens:
    ids, roles = token_table(path)
    gen = _json(path / "generation_config.json")

    def by_role(role: str) -> int | None:
        name = roles.get(role)
        return ids.get(name) if name else None

    mask = mask_id if mask_id is not None else _first(config.get("mask_token_id"))
    mask = mask if mask is not None else by_role("mask_token")
    mask = mask if mask is not None else next((ids[n] for n in MASK_NAMES if n in ids), None)
    eos = _first(config.get("eos_token_id"))
    eos = eos if eos is not None else _first(gen.get("eos_token_id"))
    eos = eos if eos is not None else by_role("eos_token")
    if mask is None or eos is None:
        what = "mask" if mask is None else "end-of-text"
        raise ValueError(f"{path}: cannot find the {what} token id in config.json, generation_config.json or the "
                         f"tokenizer files; set mask_token_id / eos_token_id in config.json (or pass mask_id=)")
    pad = _first(config.get("pad_token_id"))
    pad = pad if pad is not None else _first(gen.get("pad_token_id"))
    pad = pad if pad is not None else (by_role("pad_token") or eos)
    fim = {k: next((ids[n] for n in names if n in ids), -1) for k, names in FIM_NAMES.items()}
    return SpecialTokens(mask=mask, end_of_text=eos, end_of_middle=eos, pad=pad, **fim)


def no_adapter_message(path: Path, cfg: dict[str, Any]) -> str:
    """Why a checkpoint without a native adapter is refused (one line)."""
    return (f"{path}: model_type {cfg.get('model_type')!r} has no native adapter (known: "
            f"{', '.join(known_model_types())}); pass --trust-remote-code to run the "
            f"checkpoint's own modeling code (uncached, slower) at your own risk")


# -- weights -------------------------------------------------------------------------------
def weight_files(path: Path) -> list[Path]:
    index = path / "model.safetensors.index.json"
    if index.exists():
        return memory.weight_files(path)  # FileNotFoundError naming a missing shard
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise ModelNotFoundError(f"{path}: no *.safetensors weights (only safetensors checkpoints are loaded)")
    return files


def _set(model: nn.Module, name: str, t: Tensor, is_param: bool) -> None:
    mod_name, _, leaf = name.rpartition(".")
    mod = model.get_submodule(mod_name) if mod_name else model
    # nn.Module's own assignment: a Parameter replaces the parameter, a tensor the buffer
    # (its persistence kept)
    setattr(mod, leaf, nn.Parameter(t, requires_grad=False) if is_param else t)


def assign_weights(model: AdapterModel, path: Path, device: torch.device, dtype: torch.dtype) -> None:
    """Replace the meta tensors of `model` by the checkpoint's, each read straight to `device`."""
    params = dict(model.named_parameters())
    buffers = {n for n, _ in model.named_buffers()}
    unexpected: list[str] = []
    for f in weight_files(path):
        with safe_open(str(f), framework="pt", device=str(device)) as sf:
            for key in sf.keys():  # noqa: SIM118 - safe_open is not a mapping
                if key not in params and key not in buffers:
                    if not key.endswith(IGNORED_SUFFIXES):
                        unexpected.append(key)
                    continue
                t = sf.get_tensor(key)
                if t.is_floating_point() and t.dtype != dtype:
                    t = t.to(dtype)
                _set(model, key, t, key in params)
    model.tie_weights()
    for name, b in list(model.named_buffers()):
        if b.is_meta and name.endswith(model.optional_buffers):
            _set(model, name, torch.zeros(b.shape, dtype=torch.float32, device=device), False)
    missing = [n for n, p in model.named_parameters() if p.is_meta]
    missing += [n for n, b in model.named_buffers() if b.is_meta]
    if missing:
        raise ValueError(f"{path}: the checkpoint lacks {len(missing)} tensors, e.g. {missing[:4]}")
    if unexpected:
        log.warning("%s: %d checkpoint tensors unused by the adapter, e.g. %s", path, len(unexpected), unexpected[:4])


# -- the opt-in path -----------------------------------------------------------------------
class RemoteCodeModel(nn.Module):
    """A checkpoint's own modeling code (trust_remote_code), driven as a bidirectional model
    with no KV cache: every forward sees the whole canvas (batch of one)."""

    def __init__(self, hf: nn.Module, config: ModelConfig) -> None:
        super().__init__()
        self.hf, self.config, self.cache_batch = hf, config, 0
        self.layers: list[nn.Module] = []

    @property
    def output(self) -> nn.Module:
        return self.hf.get_output_embeddings()  # type: ignore[operator]

    def setup_cache(self, batch: int, max_len: int | None = None) -> None:
        self.cache_batch = batch

    def drop_cache(self) -> None:
        self.cache_batch = 0

    def forward(self, idx: Tensor, pos: Tensor, mask: Tensor | None = None, *, rows: Tensor | None = None,
                slots: Tensor | None = None, kv_len: int | None = None, logits_at: Tensor | None = None) -> Tensor:
        logits = self.hf(input_ids=idx).logits
        if logits_at is not None:
            logits = torch.gather(logits, 1, logits_at[:, :, None].expand(-1, -1, logits.shape[-1]))
        return logits.float()


def _load_remote(path: Path, cfg: dict[str, Any], special: SpecialTokens, device: torch.device,
                 dtype: torch.dtype) -> RemoteCodeModel:
    from transformers import AutoModel

    hf = AutoModel.from_pretrained(path, trust_remote_code=True, local_files_only=True, dtype=dtype).to(device)
    mc = ModelConfig(vocab_size=int(cfg.get("vocab_size", 0)), max_seq_len=int(cfg.get("max_position_embeddings", 4096)),
                     block_size=int(cfg.get("block_size", 32)), attention="bidirectional",
                     shift_logits=bool(cfg.get("shift_logits", False)), special=special)
    return RemoteCodeModel(hf.eval(), mc)


DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
DEFAULT_MAX_LEN = 4608  # cache positions a load plans for unless told (load_model's max_len)
# a half-precision checkpoint computes in float32 on a CPU without bf16 matrix units when that
# needs at most this share of the free memory (default_dtype)
FLOAT32_SHARE = 0.5


def cpu_has_bf16_matmul() -> bool:
    """True where the CPU multiplies bfloat16 matrices natively (Intel AMX), read from
    /proc/cpuinfo; elsewhere (no such file, other CPUs) False."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "amx_bf16" in flags


def checkpoint_dtype(cfg: dict[str, Any]) -> torch.dtype | None:
    """The dtype config.json says the weights are stored in (`torch_dtype`, or transformers 5's
    `dtype`); None when it names none this engine runs."""
    name = cfg.get("torch_dtype") or cfg.get("dtype")
    return DTYPES.get(str(name).removeprefix("torch.")) if name else None


def default_dtype(cfg: dict[str, Any], device: str | torch.device, path: Path | None = None,
                  max_len: int = DEFAULT_MAX_LEN, available: int | None = None) -> torch.dtype:
    """The dtype `auto` runs a checkpoint in (`dtype_choice`)."""
    return dtype_choice(cfg, device, path, max_len, available)[0]


def dtype_choice(cfg: dict[str, Any], device: str | torch.device, path: Path | None = None,
                 max_len: int = DEFAULT_MAX_LEN, available: int | None = None) -> tuple[torch.dtype, str]:
    """The dtype `auto` runs a checkpoint in, and why where that is not plain ("" otherwise).

    A real checkpoint runs in the dtype it is stored in (config.json's torch_dtype, else its
    weights' own, read from the safetensors headers: LLaDA-8B's config names none): bfloat16
    for LLaDA2, LLaDA-8B and Dream on an accelerator and on a CPU with native bf16 matrix units;
    float16 runs as bfloat16 on the CPU. A CPU without them multiplies bfloat16 matrices several
    times slower than float32 (torch has no fast kernel there: BENCHMARKS.md, the peer), so a
    half-precision checkpoint runs in float32 on it when that needs at most `FLOAT32_SHARE` of
    the free memory (`float32_fits`; twice the weights' bytes; `available` bytes in place of the
    machine's free memory), else in bfloat16. The embedded models (stored in float32) and
    checkpoints of unknown dtype: float32 on the CPU unless it has native bf16 matrix units,
    bfloat16 on an accelerator."""
    from engine.model.memory import stored_dtype

    cpu = torch.device(device).type == "cpu"
    stored = None
    if cfg.get("model_type") != "llada_lsp":
        stored = checkpoint_dtype(cfg)
        if stored is None and path is not None:
            stored = DTYPES.get(stored_dtype(path) or "")
    if stored is not None:
        if not cpu or stored == torch.float32:
            return stored, ""
        if path is None or cpu_has_bf16_matmul():
            return torch.bfloat16, ""
        if float32_fits(path, cfg, max_len, available):
            return torch.float32, "this CPU has no bf16 matrix units and float32 needs at most half the free memory"
        return torch.bfloat16, "this CPU has no bf16 matrix units, but float32 would need more than half the free memory"
    if not cpu:
        return torch.bfloat16, ""
    return (torch.bfloat16 if cpu_has_bf16_matmul() else torch.float32), ""


def float32_fits(path: Path, cfg: dict[str, Any], max_len: int, available: int | None = None) -> bool:
    """Whether the checkpoint at float32, with its key/value cache for `max_len` tokens, needs at
    most `FLOAT32_SHARE` of the CPU's free memory (the rest stays the user's)."""
    from engine.model.memory import plan

    p = plan(path, cfg, "float32", "cpu", max_len, available)
    return p.total <= FLOAT32_SHARE * p.available


def resolve_dtype(name: str, device: str | torch.device, model: str | Path | None = None,
                  max_len: int = DEFAULT_MAX_LEN, available: int | None = None) -> torch.dtype:
    """`auto`: `default_dtype` (`model` names the checkpoint): a real checkpoint's own dtype,
    float32 for a half-precision one on a CPU without bf16 matrix units where memory allows;
    without a checkpoint, bfloat16 on an accelerator and on CPUs with native bf16 matrix units,
    float32 on other CPUs; or a name of DTYPES."""
    if name != "auto":
        if name not in DTYPES:
            raise ValueError(f"unknown dtype {name!r}; known: auto, {', '.join(DTYPES)}")
        return DTYPES[name]
    path = resolve(model) if model is not None else None
    cfg = _json(path / "config.json") if path is not None else {}
    return default_dtype(cfg, device, path, max_len, available)


def generation_end_ids(path: Path) -> set[int]:
    """Every `eos_token_id` of generation_config.json (an id or a list)."""
    v = _json(path / "generation_config.json").get("eos_token_id")
    return {int(i) for i in (v if isinstance(v, list) else [v]) if isinstance(i, int)}


def end_id_sources(path: Path, config: dict[str, Any], special: SpecialTokens,
                   turn_ends: dict[str, int] | None = None, pad_ends: bool = True) -> dict[int, list[str]]:
    """Every id an answer ends at, with the file or rule that says so: `eos_token_id` in
    config.json and in generation_config.json (an id or a list), the tokenizer's `eos_token`,
    the chat template's end of turn (`turn_ends`: text -> id) and, with `pad_ends` (the diffusion
    checkpoints: their SFT pads every answer with it, e.g. DiffuCoder's `<|dlm_pad|>`), the pad
    token of config.json, generation_config.json or the tokenizer, unless it is the mask."""
    ids, roles = token_table(path)
    gen = _json(path / "generation_config.json")
    out: dict[int, list[str]] = {}

    def add(v: Any, source: str) -> None:
        for i in (v if isinstance(v, list) else [v]):
            if isinstance(i, int) and i >= 0 and i != special.mask and source not in out.setdefault(i, []):
                out[i].append(source)

    add(special.end_of_middle, "end of middle")
    add(config.get("eos_token_id"), "config.json eos_token_id")
    add(gen.get("eos_token_id"), "generation_config.json eos_token_id")
    if roles.get("eos_token") in ids:
        add(ids[roles["eos_token"]], f"tokenizer eos_token {roles['eos_token']}")
    for text, i in (turn_ends or {}).items():
        add(i, f"chat template end of turn {text}")
        add(special.end_of_text, "end of text (after a turn)")
    if pad_ends:
        add(config.get("pad_token_id"), "config.json pad_token_id")
        add(gen.get("pad_token_id"), "generation_config.json pad_token_id")
        if roles.get("pad_token") in ids:
            add(ids[roles["pad_token"]], f"tokenizer pad_token {roles['pad_token']} (answers are padded with it)")
    return out


def load_model(model: str | Path, device: str | torch.device = "cpu", dtype: torch.dtype | None = None,
               trust_remote_code: bool = False, mask_id: int | None = None, check_memory: bool = True,
               max_len: int = DEFAULT_MAX_LEN) -> LoadedModel:
    """Resolve offline and load `model` (a directory or a Hugging Face name) onto `device`.

    dtype: default `default_dtype` (a real checkpoint's own, bfloat16, except float32 on a CPU
    without bf16 matrix units where memory allows); the embedded models float32 on the CPU,
    bfloat16 on an accelerator.
    A load whose weights and cache would not fit the device's memory is refused before any
    weight is read (`engine.model.memory.preflight`; `check_memory=False` skips it)."""
    dev = torch.device(device)
    path = resolve(model)
    cfg = _json(path / "config.json")
    from engine.model.checkpoint import MODEL_TYPE, cpu_gemm_layout, load_checkpoint

    if cfg.get("model_type") == MODEL_TYPE:
        dt = dtype or (torch.float32 if dev.type == "cpu" else torch.bfloat16)
        emb = load_checkpoint(path, device=dev, dtype=dt)
        cpu_gemm_layout(emb)  # float32 on the CPU: weights laid out as the GEMM reads them
        return LoadedModel(emb, path, path, emb.config.special, "embedded", "exact")
    fam = find_family(cfg)
    if fam is not None:
        fam.config_check(cfg)  # a key the adapter does not implement is refused by name
    elif not trust_remote_code:
        raise ValueError(no_adapter_message(path, cfg))
    dt = dtype or default_dtype(cfg, dev, path, max_len)
    if check_memory:
        from engine.model.memory import preflight

        preflight(path, cfg, dt, dev, max_len)
    special = special_ids(path, cfg, mask_id)
    if fam is None:
        return LoadedModel(_load_remote(path, cfg, special, dev, dt), path, path, special, "remote", "none")
    with torch.device("meta"):
        m = fam.build(cfg, special)
    assign_weights(m, path, dev, dt)
    cache = "exact" if fam.attention == "block_causal" else "approximate"
    return LoadedModel(m.eval(), path, path, special, fam.name, cache)
