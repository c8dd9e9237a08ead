"""The training corpus: Python source that is on every machine, split by whole files.

The standard library (with its own tests) plus the pure-Python files of a few pinned
packages from the project's environment. The held-out split is fixed by a seed over the
files' relative paths and listed in `heldout.txt`; training never reads those files.
"""

from __future__ import annotations

import hashlib
import os
import sysconfig
from dataclasses import dataclass
from pathlib import Path

HELDOUT_LIST = Path(__file__).with_name("heldout.txt")
SPLIT_SEED = "llada-lsp-split-v1"
HELDOUT_PERCENT = 4
MAX_FILE_BYTES = 200_000
CORPUS_ENV = "LLADA_LSP_CORPUS"  # read the corpus from this folder instead of this Python's
# Pure-Python packages from the dev environment (pinned by the lock of the run's venv).
EXTRA_PACKAGES = ("transformers", "pygls", "lsprotocol", "websockets", "pygments", "rich", "tqdm")


@dataclass(frozen=True)
class SourceFile:
    key: str  # "stdlib/<rel>" or "pkg/<rel>": stable across machines of the same versions
    path: Path


def _roots() -> list[tuple[str, Path]]:
    carried = os.environ.get(CORPUS_ENV)
    if carried:  # a copy of this machine's corpus (bench/gpu/prepare.sh): same keys, same split
        stdlib, purelib = Path(carried) / "stdlib", Path(carried) / "pkg"
        if not purelib.is_dir():  # a copy of the standard library alone: this Python's packages
            purelib = Path(sysconfig.get_paths()["purelib"])
        if not stdlib.is_dir():
            raise FileNotFoundError(f"{CORPUS_ENV}={carried}: no stdlib/ folder in it")
    else:
        stdlib, purelib = Path(sysconfig.get_paths()["stdlib"]), Path(sysconfig.get_paths()["purelib"])
    roots = [("stdlib", stdlib)]
    for name in EXTRA_PACKAGES:
        if (purelib / name).is_dir():
            roots.append(("pkg", purelib / name))
    return roots


def all_files() -> list[SourceFile]:
    out: list[SourceFile] = []
    for label, root in _roots():
        for p in sorted(root.rglob("*.py")):
            rel = p.relative_to(root.parent if label == "pkg" else root).as_posix()
            if label == "stdlib" and rel.startswith(("site-packages/", "dist-packages/")):
                continue
            try:
                size = p.stat().st_size
            except OSError:
                continue
            if 0 < size <= MAX_FILE_BYTES:
                out.append(SourceFile(f"{label}/{rel}", p))
    return out


def pack(dest: Path, stdlib_only: bool = False) -> int:
    """Write every corpus file (held-out ones too: the split is by key) to a tar (xz for a
    `.xz` name, else gzip) laid out as `CORPUS_ENV` expects (`stdlib/<rel>`,
    `pkg/<package>/<rel>`); returns the count. `stdlib_only`: the packages are left to the
    other machine's Python (the held-out evaluation reads standard-library files alone)."""
    import tarfile

    files = [f for f in all_files() if not stdlib_only or f.key.startswith("stdlib/")]
    with tarfile.open(dest, "w:xz" if dest.name.endswith(".xz") else "w:gz") as tar:
        for f in files:
            tar.add(f.path, arcname=f.key, recursive=False)
    return len(files)


def is_heldout(key: str) -> bool:
    h = hashlib.sha256(f"{SPLIT_SEED}:{key}".encode()).digest()
    return int.from_bytes(h[:4], "big") % 100 < HELDOUT_PERCENT


def split() -> tuple[list[SourceFile], list[SourceFile]]:
    files = all_files()
    train = [f for f in files if not is_heldout(f.key)]
    held = [f for f in files if is_heldout(f.key)]
    return train, held


def write_heldout_list(held: list[SourceFile]) -> None:
    HELDOUT_LIST.write_text("".join(f"{f.key}\n" for f in held))


def heldout_files() -> list[SourceFile]:
    """The held-out files that exist on this machine (stdlib ones always do)."""
    wanted = set(HELDOUT_LIST.read_text().split()) if HELDOUT_LIST.exists() else None
    return [f for f in all_files() if (wanted is None and is_heldout(f.key)) or (wanted and f.key in wanted)]


def main() -> None:
    import argparse

    ap = argparse.ArgumentParser(description="Pack the training corpus for another machine.")
    ap.add_argument("dest", type=Path, help="a .tar.gz or .tar.xz file")
    ap.add_argument("--stdlib-only", action="store_true", help="leave the packages out")
    args = ap.parse_args()
    n = pack(args.dest, args.stdlib_only)
    print(f"packed {n} files")


def read_text(f: SourceFile) -> str | None:
    try:
        text = f.path.read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError):
        return None
    return text if "\x00" not in text else None


def load_texts() -> tuple[list[str], list[float], list[str]]:
    """The training texts with their sampling weights (a standard-library file weighs twice a
    package's), and the held-out standard-library texts."""
    train, held = split()
    texts, weights = [], []
    for f in train:
        t = read_text(f)
        if t is not None and t.strip():
            texts.append(t)
            weights.append(2.0 if f.key.startswith("stdlib/") else 1.0)
    held_texts = [t for f in held if f.key.startswith("stdlib/") and (t := read_text(f))]
    return texts, weights, held_texts


if __name__ == "__main__":
    main()
