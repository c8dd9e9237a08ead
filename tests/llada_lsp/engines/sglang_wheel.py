"""The pinned sglang 0.5.23 wheel's Python sources, for the contract test: downloaded once with
`pip download sglang==0.5.23 --no-deps` (PyPI; about 40 MB) and unpacked (its `sglang/srt`
and `sglang/api` Python files only) into a cache under the virtual environment,
`<sys.prefix>/cache/sglang-0.5.23`. Nothing of it is installed or imported in this process
(`sglang_contract_probe.py` runs it in a subprocess)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

VERSION = "0.5.23"
CACHE = Path(os.environ.get("LLADA_SGLANG_WHEEL_CACHE", Path(sys.prefix) / "cache")) / f"sglang-{VERSION}"
KEEP = ("sglang/srt/", "sglang/api/")
# One fixed wheel, whatever machine runs the tests: only its Python files are used, so its
# platform does not matter, and a runner with an older glibc or another Python gets it too.
WHEEL_TAGS = ("--platform", "manylinux_2_34_x86_64", "--python-version", "3.11", "--implementation", "cp",
              "--abi", "cp311")


def sources() -> Path:
    """The unpacked sources (downloading and unpacking them on first use). RuntimeError, with
    pip's own message, when the wheel cannot be fetched."""
    if (CACHE / ".complete").exists():
        return CACHE
    CACHE.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=CACHE.parent) as tmp:
        done = subprocess.run([sys.executable, "-m", "pip", "download", f"sglang=={VERSION}", "--no-deps",
                               "--only-binary=:all:", *WHEEL_TAGS, "-q", "-d", tmp], capture_output=True,
                              text=True, timeout=900)
        wheels = list(Path(tmp).glob(f"sglang-{VERSION}-*.whl"))
        if done.returncode != 0 or not wheels:
            raise RuntimeError(f"cannot download the sglang {VERSION} wheel: {done.stderr.strip()[-2000:]}")
        out = Path(tmp) / "src"
        with zipfile.ZipFile(wheels[0]) as zf:
            for name in zf.namelist():
                if name.endswith(".py") and name.startswith(KEEP):
                    zf.extract(name, out)
        (out / ".complete").write_text(wheels[0].name + "\n")
        shutil.rmtree(CACHE, ignore_errors=True)
        os.replace(out, CACHE)  # atomic: a half-unpacked cache is never seen
    return CACHE
