"""What a device call carries, and room for a larger token bank.

    python bench/gpu/carry.py [--carry .whl] [--fit] [--restore]

A device call copies the working tree (tracked files present on disk, untracked files git does
not ignore, `shared/`) plus the ignored paths it names in `carry`, 64 MiB at most. The tree
holds both embedded checkpoints; the device run trains `mini-code` and reads only the
tokenizer of `tiny-code`, so `--fit` sets `tiny-code`'s weights aside when the total is over
the limit: the file moves to `.aside/` (ignored through `.git/info/exclude`) and git is told
to skip its work-tree copy (`git update-index --skip-worktree`), so that no commit records it
as deleted. `--restore` puts it back (run it right after the device call: the tests and the
language server load `tiny-code`). Exit status 1 when the carry is still over the limit.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

LIMIT = 64 * 2**20
ASIDE = Path(".aside")
# not read on the device (bench/gpu/session.sh trains mini-code; tiny-code lends its tokenizer)
SPARE = (Path("engine/checkpoints/tiny-code/model.safetensors"),)


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=root, check=True, capture_output=True, text=True).stdout


def travelling(root: Path, carry: list[str]) -> dict[Path, int]:
    """Every file a device call would copy, with its size in bytes."""
    names = git(root, "ls-files", "-z", "--cached", "--others", "--exclude-standard").split("\0")
    paths = [Path(n) for n in names if n]
    for c in [*carry, "shared"]:
        p = root / c
        if p.is_file():
            paths.append(Path(c))
        elif p.is_dir():
            paths.extend(f.relative_to(root) for f in p.rglob("*") if f.is_file())
    return {p: (root / p).stat().st_size for p in dict.fromkeys(paths) if (root / p).is_file()}


def excluded(root: Path, entry: str) -> None:
    """Add `entry` to the repository's local ignore file once."""
    exclude = Path(git(root, "rev-parse", "--git-path", "info/exclude").strip())
    exclude = exclude if exclude.is_absolute() else root / exclude
    lines = exclude.read_text().splitlines() if exclude.exists() else []
    if entry not in lines:
        exclude.parent.mkdir(parents=True, exist_ok=True)
        exclude.write_text("\n".join([*lines, entry]) + "\n")


def set_aside(root: Path, rel: Path) -> None:
    excluded(root, f"/{ASIDE}/")
    git(root, "update-index", "--skip-worktree", str(rel))
    dest = root / ASIDE / rel
    dest.parent.mkdir(parents=True, exist_ok=True)
    (root / rel).rename(dest)


def restore(root: Path) -> list[Path]:
    """Move every set-aside file back and let git see it again."""
    back = []
    base = root / ASIDE
    for f in sorted(base.rglob("*")) if base.is_dir() else []:
        if f.is_file():
            rel = f.relative_to(base)
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            f.rename(root / rel)
            git(root, "update-index", "--no-skip-worktree", str(rel))
            back.append(rel)
    return back


def fit(root: Path, carry: list[str], limit: int = LIMIT) -> tuple[int, list[Path]]:
    """Set spare files aside until the carry fits; (bytes that travel, files set aside)."""
    aside = []
    total = sum(travelling(root, carry).values())
    for rel in SPARE:
        if total <= limit:
            break
        if (root / rel).is_file():
            size = (root / rel).stat().st_size
            set_aside(root, rel)
            aside.append(rel)
            total -= size
    return total, aside


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--carry", action="append", default=[], help="an ignored path the call carries")
    ap.add_argument("--fit", action="store_true", help="set spare files aside while over the limit")
    ap.add_argument("--restore", action="store_true", help="put set-aside files back")
    args = ap.parse_args()
    root = Path(git(Path.cwd(), "rev-parse", "--show-toplevel").strip())
    if args.restore:
        for rel in restore(root):
            print(f"restored {rel}")
        return 0
    aside: list[Path] = []
    if args.fit:
        _, aside = fit(root, args.carry)
    sizes = travelling(root, args.carry)
    total = sum(sizes.values())
    for p, n in sorted(sizes.items(), key=lambda kv: -kv[1])[:5]:
        print(f"{n / 2**20:8.2f} MiB  {p}")
    for rel in aside:
        print(f"set aside {rel} (put it back after the device call: python bench/gpu/carry.py --restore)")
    print(f"carry {total / 2**20:.2f} MiB of {LIMIT / 2**20:.0f} MiB")
    return 0 if total <= LIMIT else 1


if __name__ == "__main__":
    sys.exit(main())
