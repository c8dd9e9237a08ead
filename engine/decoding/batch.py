"""The forward of block-diffusion decoding: one batched forward for many sequences.

`execute` pads the ragged feeds of several `engine.decoding.decode.Sequence`s (each on its own KV-cache
row) into one forward and hands each its logits rows; `confidences` reads the step's rows. The
step loop (`engine.decoding.scheduler`, the only decode loop) drives them for every request.
"""

from __future__ import annotations

import torch
from torch import Tensor

import kernels
from engine.decoding.decode import Feed, Sequence, Staged, note_forward
from engine.model.native import CLEAN, INVALID, NOISY, Transformer, layout_mask
from engine.model.torch_thread import FORWARDS
from kernels import Confidence


def pieces_of(feeds: list[Feed], chunk: int) -> list[tuple[int, int, int]]:
    """(feed, start, end) batch rows: each feed whole, or with `chunk` > 0 cut into pieces of at
    most `chunk` tokens, each its own batch row on the feed's cache row. Every feed's first
    piece comes first, in feed order, then the other pieces: feeds on consecutive cache rows
    keep consecutive batch rows, which attention reads as views (`engine.model.kv_cache.row_runs`)."""
    first: list[tuple[int, int, int]] = []
    rest: list[tuple[int, int, int]] = []
    for i, f in enumerate(feeds):
        n = len(f.ids)
        step = chunk if chunk > 0 else max(1, n)
        cuts = [(i, a, min(n, a + step)) for a in range(0, max(1, n), step)]
        first.append(cuts[0])
        rest += cuts[1:]
    return first + rest


def execute(model: Transformer, seqs: list[Sequence], feeds: list[Feed], slot_attrs: list[Tensor],
            chunk: int = 0) -> list[Tensor]:
    """One batched forward for several sequences; returns each one's logits rows [K_i, V].

    slot_attrs[i]: [3, max_len] long (kind, pos, blk) of sequence i's cache row, updated here.
    `chunk` > 0 packs ragged feeds instead of padding them: a feed is cut into pieces of at most
    `chunk` tokens, each a batch row of its own that writes and reads the same cache row. Every
    layer writes all the rows' keys and values before any row attends, so a piece reads the
    pieces before it (a block's clean tokens, fed with the next block) as the whole feed would.
    """
    dev = model.output.weight.device
    FORWARDS.note(dev.type, torch.get_num_threads())
    pieces = pieces_of(feeds, chunk)
    B = len(pieces)
    T = max(b - a for _, a, b in pieces)
    picks = [[j for j, x in enumerate(feeds[i].logits_at) if a <= x < b] for i, a, b in pieces]
    K = max(1, max(len(p) for p in picks))
    S = max(f.kv_len for f in feeds)
    scratch = slot_attrs[0].shape[1] - 1  # the last slot absorbs padding writes
    for i, (seq, f) in enumerate(zip(seqs, feeds, strict=True)):  # each cache row's slots, whole
        attrs = slot_attrs[i]
        attrs[0, seq.clean_len if seq.phase != "multi" else seq.P:] = INVALID
        attrs[:, torch.tensor(f.slots)] = torch.tensor([f.kind, f.pos, f.blk])
    keys = torch.stack([slot_attrs[i][:, :S] for i, _, _ in pieces])
    # every piece's five input rows, padded to T (id 0, position 0, the scratch slot, a clean
    # token of no block), built as one tensor: a dozen small tensors cost more than the forward's
    # own set-up on a one-row step
    table = []
    for i, a, b in pieces:
        f, pad = feeds[i], [0] * (T - (b - a))
        table.append([f.ids[a:b] + pad, f.pos[a:b] + pad, f.slots[a:b] + [scratch] * len(pad),
                      f.kind[a:b] + [CLEAN] * len(pad), f.blk[a:b] + [-1] * len(pad)])
    ids, pos, slots, qk, qb = torch.tensor(table, dtype=torch.long).unbind(1)
    at = torch.tensor([[feeds[i].logits_at[j] - a for j in p] + [0] * (K - len(p))
                       for (i, a, _), p in zip(pieces, picks, strict=True)], dtype=torch.long)
    rows = torch.tensor([seqs[i].row for i, _, _ in pieces], dtype=torch.long)
    lens = torch.tensor([b - a for _, a, b in pieces], dtype=torch.long)
    ids, pos, slots, qk, qb, at, rows, lens, keys = to_device([ids, pos, slots, qk, qb, at, rows, lens, keys], dev)
    mask = None if sees_every_key(model, feeds, B, T, keys) else \
        device_mask(qk, pos, qb, keys, lens, model.config.attention == "bidirectional")
    with torch.inference_mode():
        logits = model(ids, pos, mask, rows=rows, slots=slots, kv_len=S, logits_at=at)
    note_forward(seqs)  # the requests' forward counts (engine.decoding.decode.Tally)
    if B == len(feeds):
        return [logits[r, : len(picks[r])] for r in range(B)]
    out = [logits.new_empty((len(f.logits_at), logits.shape[-1])) for f in feeds]
    for r, (i, _, _) in enumerate(pieces):  # back into each feed's logits_at order
        out[i][torch.tensor(picks[r], dtype=torch.long, device=logits.device)] = logits[r, : len(picks[r])]
    return out


def to_device(parts: list[Tensor], dev: torch.device) -> list[Tensor]:
    """The step's int64 inputs on `dev` in one host-to-device copy (pinned, asynchronous on
    CUDA): one transfer a step instead of one a tensor, and the mask is built there."""
    if dev.type == "cpu":
        return parts
    flat = torch.cat([p.reshape(-1) for p in parts])
    if dev.type == "cuda":
        flat = flat.pin_memory()
    flat = flat.to(dev, non_blocking=True)
    out, at = [], 0
    for p in parts:
        out.append(flat[at: at + p.numel()].view(p.shape))
        at += p.numel()
    return out


def sees_every_key(model: Transformer, feeds: list[Feed], B: int, T: int, keys: Tensor) -> bool:
    """Whether the step is one diffusion block at s over a clean prefix, so that its mask would
    let every query read every key: the native model on the CPU drops such a mask
    (`engine.model.native.all_visible`), so it need not be built (0.1-0.2 ms of a ~5-7 ms step).
    Only there: another model, or a mask on an accelerator, attends by another kernel without
    one. `keys` [B, 3, S]: the slots' (kind, pos, block start)."""
    if B != 1 or type(model) is not Transformer or keys.device.type != "cpu":
        return False
    f = feeds[0]
    s, n = f.blk[0], len(f.ids)
    if n != T or f.kv_len != s + n or f.slots != list(range(s, s + n)) or \
            any(k != NOISY for k in f.kind) or any(b != s for b in f.blk):
        return False
    kind, kpos = keys[0, 0, :s], keys[0, 1, :s]
    return s == 0 or bool((kind == CLEAN).all()) and int(kpos.max()) < s


def device_mask(qk: Tensor, pos: Tensor, qb: Tensor, keys: Tensor, lens: Tensor, bidirectional: bool) -> Tensor:
    """The step's [B, 1, T, S] attention mask, built on the inputs' device (no [B, T, S] copy
    from the host): `keys` [B, 3, S] (kind, pos, block start) of the slots read; the padding
    queries past each row's `lens` read slot 0, so no row of the softmax is empty."""
    mask = layout_mask(qk, pos, qb, keys[:, 0], keys[:, 1], keys[:, 2], bidirectional=bidirectional)
    pad = torch.arange(qk.shape[1], device=qk.device)[None, :] >= lens[:, None]
    mask[:, 0, :, 0] |= pad
    return mask


def confidences(staged: list[Staged], one_call: bool | None = None) -> list[Confidence | Exception]:
    """The confidences of several sequences' staged rows: on an accelerator in one call (one
    kernel launch, one reduction over the vocabulary for the whole step), split back per
    sequence; on the CPU one call a sequence, whose [16, V] rows stay in the core's cache (one
    call over the step's concatenated rows served 8 clients ~0.08 ms a row slower:
    BENCHMARKS.md, "one confidence call per step"). A sequence whose rows break the call gets
    the exception in its place; the others get their confidences. `one_call` forces the way
    (default: one call on an accelerator)."""
    if one_call is None:
        one_call = bool(staged) and staged[0].logits.is_cuda
    if staged and one_call:
        try:
            conf = kernels.confidence(torch.cat([s.logits for s in staged]), torch.cat([s.current for s in staged]))
        except Exception:  # noqa: BLE001 - find the sequence that breaks the batch, below
            pass
        else:
            assert conf.cur_prob is not None
            out: list[Confidence | Exception] = []
            at = 0
            for s in staged:
                n = s.logits.shape[0]
                out.append(Confidence(conf.top_id[at: at + n], conf.top_prob[at: at + n],
                                      conf.cur_prob[at: at + n], None))
                at += n
            return out
    return [_confidence_or_error(s) for s in staged]


def _confidence_or_error(s: Staged) -> Confidence | Exception:
    try:
        return kernels.confidence(s.logits, s.current)
    except Exception as e:  # noqa: BLE001 - the caller fails this sequence only
        return e


def length_split(lens: list[int], overhead_tokens: int) -> int:
    """Where to split decode feeds of ascending lengths `lens` into two forwards (0: keep one):
    where padding the shorter ones to the longest would cost more than one more forward. A row
    that finished a block feeds its clean tokens with the next block (twice the tokens), and
    padding every other row to it doubles the step. Cost model: a forward costs
    `overhead_tokens` fed tokens of fixed overhead plus rows x its longest feed."""
    best_i, best = 0, overhead_tokens + len(lens) * lens[-1]  # one forward, everything padded
    for i in range(1, len(lens)):
        cost = 2 * overhead_tokens + i * lens[i - 1] + (len(lens) - i) * lens[-1]
        if cost < best:
            best_i, best = i, cost
    return best_i


def new_slot_attrs(max_len: int, clean_len: int) -> Tensor:
    a = torch.zeros((3, max_len), dtype=torch.long)
    a[0, :clean_len] = CLEAN
    a[1] = torch.arange(max_len)
    a[2] = -1
    return a
