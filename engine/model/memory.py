"""The memory plan of a load, made before any weight is read: the weights' bytes at the chosen
dtype (element counts from the safetensors headers the index names: a few kB read per
shard), the key/value cache's bytes per token (from config.json) and the device's free
memory. `preflight` refuses a load that would not fit, saying what would.

No torch at import (`llada-engine check` and the language server read plans without it).
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

GIB = 1 << 30
BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
HEADROOM = 1.05  # activations, logits and allocator slack on top of weights + cache
AVAILABLE_ENV = "LLADA_MEMORY_AVAILABLE"  # bytes: overrides the detected free memory (containers, tests)


class MemoryPlanError(ValueError):
    """A load that would not fit: the message says what would."""


def _json(p: Path) -> dict[str, Any]:
    return json.loads(p.read_text(encoding="utf-8")) if p.exists() else {}


def weight_files(path: Path) -> list[Path]:
    """The safetensors files of a checkpoint: those its index names (FileNotFoundError, one line,
    when one is missing), else every *.safetensors file."""
    index = path / "model.safetensors.index.json"
    if index.exists():
        files = [path / f for f in sorted(set(_json(index)["weight_map"].values()))]
        gone = [f.name for f in files if not f.exists()]
        if gone:
            raise FileNotFoundError(f"{path}: model.safetensors.index.json names {len(gone)} weight file(s) that "
                                    f"are missing, e.g. {gone[0]} (an incomplete download?)")
        return files
    return sorted(path.glob("*.safetensors"))


def header(f: Path) -> dict[str, Any]:
    """A safetensors file's header (tensor name -> dtype, shape, offsets), read without the data."""
    with f.open("rb") as fh:
        (n,) = struct.unpack("<Q", fh.read(8))
        return json.loads(fh.read(n))


def count_elements(path: Path) -> tuple[int, int, int]:
    """(floating-point elements, their bytes as stored, other tensors' bytes) over the checkpoint."""
    elems = stored = other = 0
    for f in weight_files(path):
        for name, t in header(f).items():
            if name == "__metadata__":
                continue
            n = 1
            for d in t["shape"]:
                n *= int(d)
            size = int(t["data_offsets"][1]) - int(t["data_offsets"][0])
            if t["dtype"] in ("F32", "BF16", "F16", "F64", "F8_E4M3", "F8_E5M2"):
                elems, stored = elems + n, stored + size
            else:
                other += size
    return elems, stored, other


def stored_dtype(path: Path) -> str | None:
    """The dtype most of the weights' bytes are stored in ("bfloat16", "float16", "float32"),
    from the first shard's header; None without safetensors files."""
    names = {"BF16": "bfloat16", "F16": "float16", "F32": "float32"}
    files = weight_files(path)
    if not files:
        return None
    sizes: dict[str, int] = {}
    for name, t in header(files[0]).items():
        if name != "__metadata__" and t["dtype"] in names:
            sizes[names[t["dtype"]]] = sizes.get(names[t["dtype"]], 0) + t["data_offsets"][1] - t["data_offsets"][0]
    return max(sizes, key=lambda k: sizes[k]) if sizes else None


def kv_shape(cfg: dict[str, Any]) -> tuple[int, int, int]:
    """(layers, key/value heads, head dim) of any family's config.json."""
    if "d_model" in cfg:  # LLaDA-8B (OLMo names)
        heads = int(cfg["n_heads"])
        kv = 1 if cfg.get("multi_query_attention") else int(cfg.get("n_kv_heads") or heads)
        return int(cfg["n_layers"]), kv, int(cfg["d_model"]) // heads
    if "n_layer" in cfg:  # the embedded models
        return int(cfg["n_layer"]), int(cfg.get("n_kv_head") or cfg["n_head"]), int(cfg["dim"]) // int(cfg["n_head"])
    heads = int(cfg["num_attention_heads"])
    hd = int(cfg.get("head_dim") or int(cfg["hidden_size"]) // heads)
    return int(cfg["num_hidden_layers"]), int(cfg.get("num_key_value_heads") or heads), hd


def available_bytes(device: str) -> tuple[int, str]:
    """Free memory of `device` and where the figure came from."""
    env = os.environ.get(AVAILABLE_ENV)
    if env:
        return int(float(env)), f"${AVAILABLE_ENV}"
    if device.startswith("cuda"):
        import torch

        free, _total = torch.cuda.mem_get_info(torch.device(device))
        return int(free), "cuda free memory"
    avail, src = 0, "MemAvailable"
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                avail = int(line.split()[1]) * 1024
    except OSError:
        return 1 << 62, "unknown (no /proc/meminfo)"
    try:  # a cgroup (container) limit below the machine's
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if limit != "max":
            used = int(Path("/sys/fs/cgroup/memory.current").read_text())
            if int(limit) - used < avail:
                avail, src = int(limit) - used, "cgroup memory.max - memory.current"
    except (OSError, ValueError):
        pass
    return avail, src


@dataclass(frozen=True)
class MemoryPlan:
    dtype: str
    device: str
    params: int  # floating-point elements
    stored_bytes: int  # as the files hold them
    weight_bytes: int  # at `dtype`
    kv_bytes_per_token: int
    tokens: int  # cache positions planned (one row of max_len)
    available: int
    source: str

    @property
    def total(self) -> int:
        return int((self.weight_bytes + self.kv_bytes_per_token * self.tokens) * HEADROOM)

    @property
    def fits(self) -> bool:
        return self.total <= self.available

    def lines(self) -> list[str]:
        n = f"{self.params / 1e9:.2f}B" if self.params >= 1e8 else f"{self.params / 1e6:.1f}M"
        return [f"weights: {n} parameters, {self.weight_bytes / GIB:.2f} GiB at {self.dtype} "
                f"({self.stored_bytes / GIB:.2f} GiB as stored)",
                f"kv cache: {self.kv_bytes_per_token / 1024:.1f} KiB per token, "
                f"{self.kv_bytes_per_token * self.tokens / GIB:.2f} GiB for {self.tokens} tokens",
                f"needs {self.total / GIB:.2f} GiB (x{HEADROOM} headroom) on {self.device}; "
                f"available {self.available / GIB:.2f} GiB ({self.source}): {'fits' if self.fits else 'DOES NOT FIT'}"]

    def advice(self) -> str:
        """What would fit: a smaller dtype, another device, a smaller model."""
        tips = []
        per = self.weight_bytes / max(self.params, 1)
        if per > 2:
            half = MemoryPlan(**{**self.__dict__, "dtype": "bfloat16", "weight_bytes": self.params * 2,
                                 "kv_bytes_per_token": self.kv_bytes_per_token // 2})
            if half.fits:
                tips.append(f"--dtype bfloat16 (LSP option dtype: \"bfloat16\") needs {half.total / GIB:.2f} GiB and fits")
        room = self.available / HEADROOM - self.kv_bytes_per_token * self.tokens
        tips.append(f"at {self.dtype} this device holds a model of at most {max(room, 0) / per / 1e9:.2f}B "
                    "parameters (a smaller model)")
        if self.device == "cpu":
            tips.append(f"or a GPU with at least {self.total / GIB:.1f} GiB free (--device cuda)")
        return "; ".join(tips)


def plan(path: Path, cfg: dict[str, Any], dtype: str, device: str, max_len: int,
         available: int | None = None) -> MemoryPlan:
    elems, stored, other = count_elements(path)
    try:
        layers, kv, hd = kv_shape(cfg)
    except (KeyError, TypeError, ValueError, ZeroDivisionError):  # an architecture without these keys
        layers, kv, hd = 0, 0, 0
    size = BYTES[dtype]
    avail, src = (available, "given") if available is not None else available_bytes(device)
    return MemoryPlan(dtype=dtype, device=device, params=elems, stored_bytes=stored + other,
                      weight_bytes=elems * size + other, kv_bytes_per_token=2 * layers * kv * hd * size,
                      tokens=max_len, available=avail, source=src)


def preflight(path: Path, cfg: dict[str, Any], dtype: Any, device: Any, max_len: int) -> MemoryPlan:
    """Refuse (MemoryPlanError) a load whose plan does not fit the device's free memory."""
    name = str(dtype).removeprefix("torch.")
    p = plan(path, cfg, name, str(device), max_len)
    if not p.fits:
        raise MemoryPlanError(f"{path}: the model does not fit: it needs {p.total / GIB:.2f} GiB at {name} on "
                              f"{p.device} (weights {p.weight_bytes / GIB:.2f} GiB + cache for {p.tokens} tokens) "
                              f"but {p.available / GIB:.2f} GiB is available ({p.source}). {p.advice()}")
    return p
