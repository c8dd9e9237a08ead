"""The checkpoint that both this engine and llama.cpp's `llama-diffusion-cli` run for
bench/peer_llamacpp.py: LLaDA-8B's published config.json (tests/fakes/published.py) with depth
and width shrunk (head dim 128 and the 126,464-row vocabulary kept), random bf16 weights
(bench/real_load.py's writer), and a byte-level BPE tokenizer.json of LLaDA-8B's 126,349 tokens
with its special tokens at their real ids, and a chat template that passes the prompt through
(PASS_THROUGH_TEMPLATE).

The tokenizer is not LLaDA's (no public repository carries it): the 256 byte-level symbols at the
low ids, one merge ("q" "z", which the bench's prompts never contain: llama.cpp refuses a BPE
vocabulary without merges), unused filler entries up to the real size. Each prompt byte is one
token in both programs, so the prompt's token count is set exactly (and checked in both).

The GGUF is written by llama.cpp's own convert_hf_to_gguf.py (its gguf-py from the same source
tree), with one change made from outside, in the process that runs it: its pre-tokenizer check
(a hash of how the tokenizer splits a probe text, known only for published tokenizers) is
answered "default", llama.cpp's plain GPT-2 pre-tokenizer. Tokenization happens before either
program's timer starts; the weights and the model graph are the converter's own.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.real_load import SPECIAL, write_checkpoint  # noqa: E402
from tests.fakes.published import LLADA_8B  # noqa: E402

TOKENS = 126_349  # LLaDA-8B's tokenizer (126,464 embedding rows)
# d_model 512 with 4 heads keeps LLaDA-8B's head dim (128) and its mlp ratio (3); 2 layers, so
# that a run takes minutes on 2 shared cores without bf16 matmul instructions
SHAPE = {"d_model": 512, "n_heads": 4, "n_kv_heads": 4, "mlp_hidden_size": 1536, "n_layers": 2}
SMOKE = {"d_model": 128, "n_heads": 1, "n_kv_heads": 1, "mlp_hidden_size": 384, "n_layers": 1}
UNUSED_MERGE = ("q", "z")
# llama-diffusion-cli always applies the model's chat template (it has no flag to skip it); this
# one passes the prompt through unchanged, so that both programs read the same bare prompt
PASS_THROUGH_TEMPLATE = "{% for message in messages %}{{ message['content'] }}{% endfor %}"

CONVERT = """
import sys
src, ckpt, out = sys.argv[1:4]
sys.path[:0] = [src, src + "/gguf-py"]
from conversion.base import TextModel
TextModel.get_vocab_base_pre = lambda self, tokenizer: "default"
import convert_hf_to_gguf
sys.argv = ["convert_hf_to_gguf.py", ckpt, "--outfile", out, "--outtype", "bf16"]
convert_hf_to_gguf.main()
"""


def config(shape: dict[str, int]) -> dict[str, Any]:
    """LLaDA-8B's published config.json with `shape`'s depth and width keys replaced."""
    return LLADA_8B | shape


def write_bpe_tokenizer(out: Path) -> None:
    """tokenizer.json: byte-level BPE of TOKENS entries (see the module docstring)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {s: i for i, s in enumerate(alphabet)}
    vocab["".join(UNUSED_MERGE)] = len(vocab)
    for i in range(len(vocab), TOKENS):
        vocab[SPECIAL.get(i, f"<unused_{i}>")] = i
    tok = Tokenizer(models.BPE(vocab, [UNUSED_MERGE]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(SPECIAL[i], special=True, normalized=False) for i in sorted(SPECIAL)])
    tok.save(str(out / "tokenizer.json"))


def ensure_checkpoint(out: Path, shape: dict[str, int]) -> Path:
    """The checkpoint of `shape` in `out` (written unless it is there already)."""
    stamp = out / "peer_shape.json"
    if stamp.exists() and json.loads(stamp.read_text()) == shape:
        return out
    write_checkpoint(out, config(shape))
    write_bpe_tokenizer(out)
    tc = out / "tokenizer_config.json"
    tc.write_text(json.dumps(json.loads(tc.read_text()) | {"chat_template": PASS_THROUGH_TEMPLATE}))
    stamp.write_text(json.dumps(shape))
    return out


def ensure_gguf(ckpt: Path, llama_src: Path, out: Path) -> Path:
    """`ckpt` converted to a bf16 GGUF at `out` by `llama_src`'s convert_hf_to_gguf.py (unless
    `out` is newer than the checkpoint's weights)."""
    stamp = ckpt / "peer_shape.json"
    if out.exists() and stamp.exists() and out.stat().st_mtime > stamp.stat().st_mtime:
        return out
    if not (llama_src / "convert_hf_to_gguf.py").exists():
        raise SystemExit(f"{llama_src}/convert_hf_to_gguf.py not found: build llama.cpp with "
                         "bench/peer_llamacpp_build.sh (it keeps the source beside the build)")
    r = subprocess.run([sys.executable, "-c", CONVERT, str(llama_src), str(ckpt), str(out)],
                       capture_output=True, text=True)
    if r.returncode != 0 or not out.exists():
        raise SystemExit(f"convert_hf_to_gguf.py failed ({r.returncode}):\n{r.stderr[-3000:]}")
    return out
