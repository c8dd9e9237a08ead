"""What a device call carries (bench/gpu/carry.py), on a real git repository."""

from __future__ import annotations

import importlib.util
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("gpu_carry", ROOT / "bench/gpu/carry.py")
assert spec and spec.loader
carry = importlib.util.module_from_spec(spec)
spec.loader.exec_module(carry)


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=root, check=True, capture_output=True, text=True).stdout


def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "engine/checkpoints/tiny-code").mkdir(parents=True)
    git(root, "init", "-q")
    git(root, "config", "user.email", "t@example.com")
    git(root, "config", "user.name", "t")
    (root / carry.SPARE[0]).write_bytes(b"w" * 5000)
    (root / "code.py").write_text("x = 1\n")
    (root / ".gitignore").write_text("/.whl/\n/build/\n")
    git(root, "add", ".")
    git(root, "commit", "-qm", "init")
    (root / "notes.txt").write_text("untracked, not ignored\n")
    (root / ".whl").mkdir()
    (root / ".whl/bank.npz.xz").write_bytes(b"b" * 3000)
    (root / "build").mkdir()
    (root / "build/big.bin").write_bytes(b"i" * 90000)  # ignored, not carried
    return root


def test_travelling_counts_tracked_untracked_and_carried_only(tmp_path: Path) -> None:
    root = repo(tmp_path)
    sizes = carry.travelling(root, [".whl"])
    assert sizes[carry.SPARE[0]] == 5000 and sizes[Path(".whl/bank.npz.xz")] == 3000
    assert Path("notes.txt") in sizes and Path("code.py") in sizes
    assert not any(p.parts[0] == "build" for p in sizes)
    assert Path(".whl/bank.npz.xz") not in carry.travelling(root, [])


def test_fit_sets_the_spare_weights_aside_and_restore_puts_them_back(tmp_path: Path) -> None:
    root = repo(tmp_path)
    before = sum(carry.travelling(root, [".whl"]).values())
    total, aside = carry.fit(root, [".whl"], limit=before + 1)
    assert aside == [] and total == before  # under the limit: nothing moves
    total, aside = carry.fit(root, [".whl"], limit=before - 1)
    assert aside == [carry.SPARE[0]] and total == before - 5000
    assert not (root / carry.SPARE[0]).exists()
    assert sum(carry.travelling(root, [".whl"]).values()) == total
    assert git(root, "status", "--porcelain", "--untracked-files=no") == ""  # nothing to commit: the file is not "deleted"
    git(root, "commit", "-qam", "x", "--allow-empty")
    assert str(carry.SPARE[0]) in git(root, "ls-files")  # a commit -a kept it tracked
    assert carry.restore(root) == [carry.SPARE[0]]
    assert (root / carry.SPARE[0]).read_bytes() == b"w" * 5000
    assert not git(root, "ls-files", "-v", str(carry.SPARE[0])).startswith("S")
    assert git(root, "status", "--porcelain", "--untracked-files=no") == ""


def test_fit_reports_a_carry_that_cannot_fit(tmp_path: Path) -> None:
    root = repo(tmp_path)
    total, aside = carry.fit(root, [".whl"], limit=100)
    assert aside == [carry.SPARE[0]] and total > 100
    carry.restore(root)
