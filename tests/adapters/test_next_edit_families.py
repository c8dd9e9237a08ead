"""Next-edit passes on the real families (LLaDA2.x, LLaDA-8B, Dream) against the independent
reference forwards (`reference_models`).

A next-edit pass gives the model an existing region as a committed draft; with no masks on
the canvas, the published attention recipe of each family is a single uncached forward over
the canvas (LLaDA2: block-causal over blocks aligned from position 0, so every region token
sees the blocks before its own and its own block whole; LLaDA-8B and Dream: everything, the
suffix included; Dream reads position i's prediction from row i - 1). A position is replaced
when the top token differs from the draft's, is not a special token, and its probability
reaches the threshold; the next pass reads the replaced tokens; passes stop after one that
changes nothing. The reference does exactly that, uncached, and the engine (cached, one
multi-block forward a pass) must give the same region text and the same number of forwards.
Tiny random checkpoints with a character tokenizer (no blank lines: it has no token for
"\n\n"): one token per character, so the region's
text is its tokens. The threshold is taken between two of the reference's own first-pass
confidences, so some disagreements pass it and some do not.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import reference_models as ref
import torch
from test_adapter_service import char_tokenizer
from tiny_ckpts import write_dream, write_llada, write_llada2

from engine.api import NextEditRequest
from engine.decoding.next_edit import rewritten
from engine.service import TextEngine

PREFIX = "import os\nimport sys\n# the area of a rectangle, and its use\ndef area(w, h):\n"
REGION = "    s = w * h\n    return s + area(h, w)\nprint(area(2, 3))\n"
SUFFIX = "\nx = 1\n"
FAMILIES = [(write_llada2, "llada2"), (write_llada, "llada"), (write_dream, "dream")]


class Reference:
    """The family's uncached forward over a canvas, as probabilities of the region's tokens."""

    def __init__(self, family: str, path: Path, eng: TextEngine, prompt: list[int], suffix: list[int], n: int) -> None:
        self.family, self.prompt, self.suffix, self.n = family, prompt, suffix, n
        self.cfg, self.state = ref.load_checkpoint(path)
        c = eng.model.config
        self.block, self.pad = c.block_size, c.special.end_of_middle
        lead = len(prompt) % self.block if family == "llada2" else 0
        self.cap = -(-(n + lead) // self.block) * self.block - lead  # the canvas's middle slots

    def probs(self, region: list[int]) -> torch.Tensor:
        P, n = len(self.prompt), self.n
        x = [*self.prompt, *region, *[self.pad] * (self.cap - n)]
        if self.family == "llada2":
            logits = ref.llada2_logits(self.cfg, self.state, x, ref.block_causal(len(x), self.block))[P:P + n]
        elif self.family == "llada":
            logits = ref.llada_logits(self.cfg, self.state, [*x, *self.suffix])[P:P + n]
        else:
            logits = ref.dream_logits(self.cfg, self.state, [*x, *self.suffix])[P - 1:P + n - 1]
        return torch.softmax(logits.float(), dim=-1)

    def passes(self, region: list[int], threshold: float, ignore: frozenset[int], max_passes: int
               ) -> tuple[list[int], int]:
        """The region after the edit passes, and the passes (forwards) taken."""
        cur = list(region)
        for k in range(1, max_passes + 1):
            conf, top = self.probs(cur).max(dim=-1)
            edits = [j for j in range(self.n) if int(top[j]) != cur[j] and int(top[j]) not in ignore
                     and float(conf[j]) >= threshold]
            for j in edits:
                cur[j] = int(top[j])
            if not edits:
                return cur, k
        return cur, max_passes


def split_threshold(probs: torch.Tensor, region: list[int], ignore: frozenset[int]) -> float:
    """A threshold between two first-pass confidences of disagreeing positions, about the
    middle one, with a clear gap on both sides (no rounding can put one on the other side)."""
    conf, top = probs.max(dim=-1)
    vals = sorted(float(conf[j]) for j in range(len(region)) if int(top[j]) != region[j] and int(top[j]) not in ignore)
    assert len(vals) >= 4, vals
    gaps = [(vals[i + 1] - vals[i], i) for i in range(len(vals) - 1)]
    mid = len(vals) // 2
    gap, i = max((g, i) for g, i in gaps if abs(i - mid) <= max(1, len(vals) // 4))
    assert gap > 1e-5, vals
    return (vals[i] + vals[i + 1]) / 2


@pytest.mark.parametrize("write, family", FAMILIES)
def test_next_edit_passes_match_the_reference(write: Callable[[Path], Path], family: str, tmp_path: Path) -> None:
    path = write(tmp_path / family)
    char_tokenizer(path)
    eng = TextEngine(path, threads=1, max_len=512, max_prompt_tokens=128, dtype=torch.float32)  # the reference is float32
    assert eng.info()["family"] == family
    prompt, suffix, _, _ = eng.layout(PREFIX, SUFFIX, heal=False, doc_key="d.py")
    region = eng.tok.encode(REGION).ids
    assert eng.tok.decode(region) == REGION and len(region) == len(REGION)  # a token a character
    reference = Reference(family, path, eng, prompt, suffix, len(region))
    ignore = eng.special_ids
    threshold = split_threshold(reference.probs(region), region, ignore)
    for max_passes in (1, 3):
        want, want_passes = reference.passes(region, threshold, ignore, max_passes)
        assert want != region  # the threshold lets some edits through
        req = NextEditRequest(f"ne-{max_passes}", "d.py", PREFIX, REGION, SUFFIX, threshold=threshold,
                              max_passes=max_passes)
        done = list(eng.next_edit(req))[-1]
        assert done.kind == "done" and done.stats is not None, done
        assert done.text == eng.tok.decode(want), (family, max_passes)
        assert rewritten(REGION, done.suggestions) == done.text
        assert all(s.confidence >= threshold - 1e-6 for s in done.suggestions)
        assert done.stats["forwards"] == want_passes, done.stats
    if family == "llada2":  # exact cache: the same request again reuses the prompt's whole blocks
        assert len(prompt) > reference.block
        again = list(eng.next_edit(req))[-1]
        assert again.stats is not None and again.stats["reused_tokens"] > 0
        assert again.text == done.text
