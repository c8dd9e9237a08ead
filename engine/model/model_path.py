"""Where a model lives on this machine: one resolver for the loader, the daemon and the CLI.

No torch here (the language server's auto-start imports it through `engine.daemon.runtime`).
A model is named by: nothing or "embedded" (the default: `$LLADA_MODEL`, a directory or a
packaged checkpoint's name, else the packaged tiny-code), a local checkpoint directory, the
name of a packaged checkpoint (tiny-code, mini-code), or a Hugging Face repo id whose
snapshot is already in the local cache. Nothing is ever downloaded; a
miss says what to download and where.
"""

from __future__ import annotations

import os
from pathlib import Path

CHECKPOINTS_DIR = Path(__file__).resolve().parents[1] / "checkpoints"
EMBEDDED_DIR = CHECKPOINTS_DIR / "tiny-code"


class ModelNotFoundError(FileNotFoundError):
    """A model name or path that resolves to no checkpoint on this machine."""


def _checkpoint_dir(p: Path) -> Path:
    if not (p / "config.json").exists():
        raise ModelNotFoundError(f"{p} is a directory but holds no config.json: not a model checkpoint")
    return p


def hf_snapshot(name: str) -> Path:
    """The local Hugging Face cache's snapshot of repo `name` (offline lookup only)."""
    os.environ["HF_HUB_OFFLINE"] = "1"  # never touch the network, here or in transformers
    from huggingface_hub import constants, snapshot_download

    try:
        snap = Path(snapshot_download(repo_id=name, local_files_only=True))
    except (FileNotFoundError, ValueError, OSError) as e:
        raise ModelNotFoundError(
            f"model {name!r} not found: it is not a local directory and not in the local Hugging Face "
            f"cache ({constants.HF_HUB_CACHE}). Models are never downloaded at run time; download it "
            f"once with `hf download {name}` (or `huggingface-cli download {name}`), point HF_HOME / "
            f"HF_HUB_CACHE at the cache that holds it, or pass --model /path/to/checkpoint-dir "
            f"({e.__class__.__name__})."
        ) from None
    if not (snap / "config.json").exists():
        raise ModelNotFoundError(f"cached snapshot {snap} of {name!r} has no config.json: download it again "
                                 f"with `hf download {name}`")
    return snap


def resolve(model: str | Path | None = None) -> Path:
    """The checkpoint directory that `model` names (see the module docstring)."""
    if model is None or str(model) in ("", "embedded"):
        env = os.environ.get("LLADA_MODEL", "")
        if env and "/" not in env and (CHECKPOINTS_DIR / env / "config.json").exists():
            return CHECKPOINTS_DIR / env  # a packaged checkpoint's name: LLADA_MODEL=mini-code
        d = Path(env or EMBEDDED_DIR)
        if not (d / "config.json").exists():
            raise ModelNotFoundError(f"the embedded model is missing at {d} (no config.json): reinstall "
                                     "llada-lsp, set LLADA_MODEL to a model directory, or pass --model PATH")
        return d
    p = Path(model).expanduser()
    if p.is_dir():
        return _checkpoint_dir(p)
    name = str(model)
    packaged = CHECKPOINTS_DIR / name
    if "/" not in name and (packaged / "config.json").exists():
        return packaged
    if name.startswith((".", "/", "~")) or name.count("/") != 1:
        raise ModelNotFoundError(f"model {name!r}: no such directory, and not a Hugging Face repo id "
                                 "(owner/name)")
    return hf_snapshot(name)
