"""A reference transcription of LLaDA2.2's in/del decoding, for tests/engine/model/adapters/test_indel.py.

Written from SGLang's `JointThresholdInDel` (the open pull request in the stored history,
python/sglang/srt/dllm/algorithm/joint_threshold_indel.py, its list-based first version:
`_apply_edit_operations` and `step`, with the defaults threshold 0.5, edit_threshold 0,
max_post_edit_steps 16, min_mask_transfer 1), in plain Python lists over the independent
reference forward (reference_models.llada2_logits, uncached: the window up to the active
block under the block-causal mask, as LLaDA2's generate() feeds it). SGLang runs a block for
at most block + max_post_edit_steps + 1 steps. It shares no code with engine.decoding.indel.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from tests.engine.model.adapters.reference_models import block_causal, llada2_logits


@dataclass
class Trace:
    blocks: list[list[list[int]]] = field(default_factory=list)  # per block: the block after each forward
    deletes: int = 0
    inserts: int = 0
    loop_guards: int = 0
    forced: int = 0


def edit_block(tokens: list[int], old: list[int], orig: list[bool], size: int, mask: int, delete: int,
               split: int) -> tuple[list[int], list[bool]]:
    """_apply_edit_operations: DELETE drops, SPLIT -> [mask, old token], pad/truncate."""
    out, track = [], []
    for i, t in enumerate(tokens):
        if t == delete:
            continue
        if t == split:
            out.extend([mask, old[i]])
            track.extend([False, orig[i]])
        else:
            out.append(t)
            track.append(orig[i])
    if len(out) > size:
        out, track = out[:size], track[:size]
    while len(out) < size:
        out.append(mask)
        track.append(False)
    return out, track


def indel_generate(cfg: dict[str, Any], state: dict[str, torch.Tensor], prompt: list[int], gen_length: int,
                   block: int, mask: int, delete: int, split: int, threshold: float = 0.5,
                   edit_threshold: float = 0.0, max_post: int = 16) -> tuple[list[int], int, Trace]:
    P = len(prompt)
    n_blocks = -(-(P + gen_length) // block)
    x = prompt + [mask] * (n_blocks * block - P)
    allowed = block_causal(n_blocks * block, block)
    forwards, trace = 0, Trace()
    for b in range(P // block, n_blocks):
        start, end = b * block, (b + 1) * block
        prompt_mask = [j < P for j in range(start, end)]
        is_orig = [x[j] == mask for j in range(start, end)]
        post, seen, history = 0, set(), {}  # type: ignore[var-annotated]
        steps: list[list[int]] = []
        trace.blocks.append(steps)
        for _ in range(block + max_post + 1):
            logits = llada2_logits(cfg, state, x[:end], allowed[:end, :end])[start:end]
            forwards += 1
            probs = torch.softmax(logits, dim=-1)
            pv, xv = probs.max(dim=-1)
            p, xs = pv.tolist(), xv.tolist()
            cur = x[start:end]
            is_mask = [t == mask for t in cur]
            n_orig = sum(1 for i in range(block) if is_orig[i] and is_mask[i])
            n_total = sum(is_mask)
            transfer = [False] * block
            if n_total:
                if n_orig > 0:
                    need = 1 + (n_total - n_orig)
                    high = [is_mask[i] and p[i] > threshold for i in range(block)]
                    if sum(high) >= need:
                        transfer = high
                    else:
                        ranked = sorted((i for i in range(block) if is_mask[i]), key=lambda i: -p[i])
                        for i in ranked[:min(need, n_total)]:
                            transfer[i] = True
                else:
                    transfer = list(is_mask)
            force = False
            if n_orig == 0:
                post += 1
                if post > max_post:
                    force = True
                    for i in range(block):
                        if xs[i] in (delete, split):
                            row = logits[i].clone()
                            row[delete] = row[split] = float("-inf")
                            xs[i] = int(row.argmax())
            edit = [not is_mask[i] and not prompt_mask[i] and p[i] > edit_threshold and cur[i] != xs[i]
                    for i in range(block)]
            write = [transfer[i] or edit[i] for i in range(block)]
            if not any(write):
                steps.append(list(cur))
                break
            key = tuple(cur)
            if key in seen and not force:
                changing = [i for i in range(block) if write[i] and xs[i] != cur[i]]
                if changing:
                    i = min(changing, key=lambda j: p[j])
                    row = logits[i].clone()
                    for t in history.get(i, ()):
                        row[t] = float("-inf")
                    xs[i] = int(row.argmax())
                    trace.loop_guards += 1
            seen.add(key)
            for i in range(block):
                if write[i]:
                    history.setdefault(i, set()).add(xs[i])
            new = [xs[i] if write[i] else cur[i] for i in range(block)]
            trace.deletes += new.count(delete)
            trace.inserts += new.count(split)
            x[start:end], is_orig = edit_block(new, cur, is_orig, block, mask, delete, split)
            steps.append(x[start:end])
            if force:
                trace.forced += 1
                break
    return x[P:], forwards, trace
