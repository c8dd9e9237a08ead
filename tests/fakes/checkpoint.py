"""A FAKE LLaDA2 checkpoint directory for tests and benches of the SGLang backend: the packaged
tiny-code tokenizer (FIM markers, end-of-middle id 2) under a config.json that names
`LLaDA2MoeModelLM`, as a Hugging Face snapshot of inclusionAI/LLaDA2.x-mini does. Only the
local tokenizer and the family check read it; no weights, and the real LLaDA2 tokenizer is
another (its prompts are chat-templated). Pair it with `FakeSglang(tokenizer=dir, end_token_id=
END_OF_MIDDLE)`, so that both sides speak the same ids.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

TOKENIZER = Path(__file__).resolve().parents[2] / "engine" / "checkpoints" / "tiny-code" / "tokenizer.json"
END_OF_MIDDLE = 2  # tiny-code's end-of-middle id (its config.json "special")


def llada2_dir(path: Path) -> Path:
    """Write the fake checkpoint into `path` (created) and return it."""
    path.mkdir(parents=True, exist_ok=True)
    shutil.copy(TOKENIZER, path / "tokenizer.json")
    (path / "config.json").write_text(json.dumps({
        "architectures": ["LLaDA2MoeModelLM"], "model_type": "llada2_moe",
        "_name_or_path": "fake/LLaDA2-tokenizer-for-tests"}))
    return path


# LLaDA2.2's published config keys the SGLang server reads (docs/models.md, "LLaDA2.2")
LLADA22_KEYS = {"expert_capacity": 48, "block_size": 32, "delete_token_id": 156930, "split_token_id": 156931}


def llada22_dir(path: Path) -> Path:
    """The fake checkpoint as LLaDA2.2: `llada2_dir` with block routing and the edit tokens in
    its config.json (the local copy the SGLang client reads them from)."""
    llada2_dir(path)
    cfg = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**cfg, **LLADA22_KEYS,
                                                  "_name_or_path": "fake/LLaDA2.2-tokenizer-for-tests"}))
    return path
