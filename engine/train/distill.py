"""Teacher trajectories for certainty-forcing self-distillation (after dParallel, Chen et al. 2025).

    python -m engine.train.distill --model engine/checkpoints/tiny-code --out runs/d/teacher.pt \
        --examples 3000 [--batch 8] [--seed 10]

A small diffusion model is rarely confident while most of its block is masked, so a
threshold rule commits about one token per forward. Certainty forcing trains the model
towards its own careful answer from mostly masked blocks and penalises its entropy where it
already predicts that answer: the answer stays the model's own (what it would write one
token at a time), but it learns to commit several of its tokens per forward.

This module is step one: the teacher (the model itself) decodes infill prompts cut from the
training split, one token per forward left to right with the degenerate-loop guard, batched
over the KV cache. Each kept example is the prompt and the teacher's middle ended by
end-of-middle and padded to whole blocks, exactly the `Encoded` rows the trainer reads.
Answers that run to the budget without ending, or are empty, are dropped. `--filter-from
FILE` keeps only the rows of a teacher file whose middle adds no Python parse error. Step two
is `engine.train.train --distill FILE` (its `--distill-frac` and `--certainty`).
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from tokenizers import Tokenizer
from torch import Tensor
from tqdm import tqdm
from tree_sitter import Node, Parser

from engine.decoding.batch import execute, new_slot_attrs
from engine.decoding.decode import Sequence
from engine.decoding.loops import DEFAULT_REPEATS
from engine.decoding.policies import make_policy
from engine.model.native import Transformer
from engine.train.data import MAX_MIDDLE, PY, Encoded, ExampleStream

PREFILL_SPLIT_BLOCKS = 2  # feeds longer than this many blocks (prompt prefills) run alone


@dataclass
class Slot:
    seq: Sequence
    attrs: Tensor
    source: Encoded


@dataclass
class Stats:
    decoded: int = 0
    kept: int = 0
    no_end: int = 0
    empty: int = 0
    forwards: int = 0
    middle_tokens: int = 0
    seconds: float = 0.0
    by_reason: dict[str, int] = field(default_factory=dict)


def teacher_row(prompt: list[int], middle: list[int], eom: int, block: int) -> Encoded:
    """The trainer's row for a prompt and the teacher's middle (without its end)."""
    mid = [*middle, eom]
    mid += [eom] * ((-len(mid)) % block)
    return Encoded([*prompt, *mid], len(prompt), len(mid))


def teacher_rows(model: Transformer, stream: ExampleStream, n: int, batch: int,
                 max_new: int = MAX_MIDDLE - 1, progress: bool = True) -> tuple[list[Encoded], Stats]:
    """Decode prompts from `stream` with the teacher until `n` rows are kept."""
    sp, b = model.config.special, model.config.block_size
    assert sp is not None
    max_len = model.config.max_seq_len
    model.setup_cache(batch, max_len)
    policy = make_policy("one_per_step")
    free = list(range(batch - 1, -1, -1))
    slots: dict[int, Slot] = {}
    out: list[Encoded] = []
    st = Stats()
    t0 = time.perf_counter()
    bar = tqdm(total=n, desc="teacher", disable=not progress)
    while len(out) < n:
        while free and len(out) + len(slots) < n:
            src = stream.next()
            row = free.pop()
            seq = Sequence(src.ids[: src.prompt_len], sp, policy, b, max_new, model.config.shift_logits,
                           row=row, max_len=max_len)
            seq.loop_repeats = DEFAULT_REPEATS
            slots[row] = Slot(seq, new_slot_attrs(max_len, 0), src)
        order = sorted(slots)
        feeds = {r: slots[r].seq.prepare() for r in order}
        short = [r for r in order if len(feeds[r].ids) <= PREFILL_SPLIT_BLOCKS * b]
        groups = ([short] if short else []) + [[r] for r in order if r not in short]
        for g in groups:
            logits = execute(model, [slots[r].seq for r in g], [feeds[r] for r in g], [slots[r].attrs for r in g])
            st.forwards += 1
            for r, lg in zip(g, logits, strict=True):
                slots[r].seq.update(lg.float())
        for r in order:
            s = slots[r]
            if not s.seq.done():
                continue
            del slots[r]
            free.append(r)
            free.sort(reverse=True)
            st.decoded += 1
            reason = str(s.seq.reason)
            st.by_reason[reason] = st.by_reason.get(reason, 0) + 1
            middle = s.seq.final_middle()
            if reason != "end_of_middle":
                st.no_end += 1
            elif not middle:
                st.empty += 1
            else:
                out.append(teacher_row(s.source.ids[: s.source.prompt_len], middle, sp.end_of_middle, b))
                st.kept += 1
                st.middle_tokens += len(middle)
                bar.update(1)
    bar.close()
    st.seconds = time.perf_counter() - t0
    return out, st


def _errors(node: Node) -> int:
    if node.is_error or node.is_missing:
        return 1
    return sum(_errors(c) for c in node.children) if node.has_error else 0


def adds_parse_error(row: Encoded, tok: Tokenizer, fim_prefix: int, end_of_middle: int,
                     parser: Parser | None = None) -> bool:
    """Whether a row's middle gives its prompt's code more Python parse errors than the
    prompt's prefix and suffix joined without it (the prompt's own cut edges cancel out)."""
    ids = row.ids
    p = ids.index(fim_prefix)
    suffix, prefix = tok.decode(ids[1:p]), tok.decode(ids[p + 1: row.prompt_len - 1])
    middle = tok.decode([t for t in ids[row.prompt_len:] if t != end_of_middle])
    parser = parser or Parser(PY)
    base = _errors(parser.parse((prefix + suffix).encode()).root_node)
    return _errors(parser.parse((prefix + middle + suffix).encode()).root_node) > base


def save_rows(path: Path, rows: list[Encoded], meta: dict[str, object]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"rows": [(r.ids, r.prompt_len, r.middle_len) for r in rows], "meta": meta}, path)


def load_rows(path: Path) -> list[Encoded]:
    data = torch.load(path, weights_only=True)
    return [Encoded(list(ids), int(p), int(m)) for ids, p, m in data["rows"]]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, required=True, help="the teacher checkpoint directory")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--examples", type=int, default=3000)
    ap.add_argument("--batch", type=int, default=8, help="sequences decoded together")
    ap.add_argument("--seed", type=int, default=10, help="seed of the prompt stream (training split)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--dtype", default="auto", help="float32 | bfloat16 | auto")
    ap.add_argument("--filter-from", type=Path, help="no decoding: keep the rows of this teacher file "
                    "whose middle adds no parse error (--model gives the tokenizer)")
    args = ap.parse_args()
    if args.filter_from is not None:
        filter_main(args)
        return
    torch.set_num_threads(args.threads)
    from engine.model.checkpoint import load_checkpoint
    from engine.model.loader import resolve_dtype
    from engine.prompt.tokenizer import load_tokenizer
    from engine.train.corpus import load_texts

    dtype = resolve_dtype(args.dtype, "cpu")
    model = load_checkpoint(args.model).to(dtype).eval()
    tok = load_tokenizer(args.model)
    sp = model.config.special
    assert sp is not None
    texts, weights, _ = load_texts()
    stream = ExampleStream(texts, weights, tok, sp, model.config.block_size, seed=args.seed)
    rows, st = teacher_rows(model, stream, args.examples, args.batch)
    meta = {"teacher": str(args.model), "seed": args.seed, "dtype": str(dtype), **vars(st)}
    save_rows(args.out, rows, meta)
    print(f"kept {st.kept} of {st.decoded} ({st.no_end} without an end, {st.empty} empty), "
          f"{st.middle_tokens / max(1, st.kept):.1f} middle tokens each, {st.forwards} forwards, "
          f"{st.seconds:.0f} s -> {args.out}")


def filter_main(args: argparse.Namespace) -> None:
    from engine.model.checkpoint import load_config
    from engine.prompt.tokenizer import load_tokenizer

    sp = load_config(args.model).special
    assert sp is not None
    tok, parser = load_tokenizer(args.model), Parser(PY)
    rows = load_rows(args.filter_from)
    kept = [r for r in rows if not adds_parse_error(r, tok, sp.fim_prefix, sp.end_of_middle, parser)]
    save_rows(args.out, kept, {"filtered_from": str(args.filter_from), "rule": "adds no parse error"})
    print(f"kept {len(kept)} of {len(rows)} rows whose middle adds no parse error -> {args.out}")


if __name__ == "__main__":
    main()
