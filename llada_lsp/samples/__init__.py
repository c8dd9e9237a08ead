"""Sample files for `llada-lsp demo` (data, not code the server runs)."""

from pathlib import Path

SAMPLES = Path(__file__).resolve().parent
DEFAULT = SAMPLES / "stats.py"
