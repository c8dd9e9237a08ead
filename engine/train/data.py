"""Fill-in-the-middle examples cut from real source by syntactic spans, and their batches.

An example is the suffix-first layout the engine decodes with:
    <fim_suffix> suffix <fim_prefix> prefix <fim_middle> middle <eom> <eom>...
with the middle padded by end-of-middle tokens to a whole number of diffusion blocks.
Prefix, middle and suffix are tokenized separately, exactly as at inference time, so the
model sees the token boundary at the cursor the way the engine will show it.

A batch holds the clean sequence (causal: next-token loss everywhere) followed by a noisy
copy of the middle blocks (masked with ratio t per block, and with some visible tokens
replaced by random ones for token-to-token editing), each noisy block reading the clean
tokens before it and itself.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, replace

import torch
import tree_sitter_python
from tokenizers import Tokenizer
from torch import Tensor
from tree_sitter import Language, Node, Parser, Query, QueryCursor

from engine.model.native import CLEAN, NOISY, SpecialTokens, layout_mask

PY = Language(tree_sitter_python.language())
BLOCKS = Query(PY, "(block) @b")
BLOCK_PARENTS = {
    "function_definition", "class_definition", "if_statement", "for_statement",
    "while_statement", "with_statement", "try_statement", "elif_clause", "else_clause",
    "except_clause", "finally_clause",
}
KINDS = ("line", "multi_line", "block", "span")
KIND_WEIGHTS = (0.4, 0.25, 0.25, 0.1)
_NEWLINE = re.compile("\n")
# the diffusion noise of a middle block (make_batch; echo.renoise draws it again)
MIN_T = 0.1  # mask ratio t ~ U[MIN_T, 1]
EDIT_NOISE = 0.1  # share of visible tokens replaced at random (T2T editing)
KEPT_WEIGHT = 0.25  # loss weight of a visible token left as it is
N_SPECIAL = 8  # random replacement tokens avoid the special ids (all below this)


@dataclass
class Example:
    kind: str
    prefix: str
    middle: str
    suffix: str


def _line_starts(text: str) -> list[int]:
    return [0, *(m.end() for m in _NEWLINE.finditer(text))]


def _code_start(text: str, line_start: int) -> int:
    i = line_start
    while i < len(text) and text[i] in " \t":
        i += 1
    return i


def _collect_blocks(root: Node, out: list[Node], limit: int = 4000) -> None:
    """The block bodies of compound statements and definitions, found by a tree-sitter query
    (~25x faster than walking every node from Python), in the order of the walk the examples
    were first cut with (depth first, last child first: by end descending, outer first), so
    that a seed still picks the same examples and held-out losses stay comparable."""
    found = QueryCursor(BLOCKS).captures(root).get("b", [])
    found = sorted((n for n in found if n.parent is not None and n.parent.type in BLOCK_PARENTS),
                   key=lambda n: (-n.end_byte, n.start_byte))
    out.extend(found[: max(0, limit - len(out))])


@dataclass(frozen=True)
class Span:
    """A block body of the syntax tree: its byte range (the size filter) and its characters."""

    start_byte: int
    end_byte: int
    start: int
    end: int


def block_spans(text: str, root: Node) -> list[Span]:
    nodes: list[Node] = []
    _collect_blocks(root, nodes)
    raw = text.encode("utf-8")
    return [Span(b.start_byte, b.end_byte, len(raw[: b.start_byte].decode("utf-8", errors="ignore")),
                 len(raw[: b.end_byte].decode("utf-8", errors="ignore"))) for b in nodes]


def cut_example(text: str, kind: str, rng: random.Random, tree_root: Node | None = None,
                max_middle_chars: int = 400, lines: list[int] | None = None,
                spans: list[Span] | None = None) -> Example | None:
    """Cut one infill example of `kind` from `text`, or None when none fits. `lines` (line
    starts) and `spans` (block bodies) may come precomputed, as `ExampleStream` caches them."""
    lines = _line_starts(text) if lines is None else lines
    if len(lines) < 3:
        return None
    if kind == "line":
        i = rng.randrange(len(lines) - 1)
        start, end = _code_start(text, lines[i]), lines[i + 1] - 1
        if end - start < 2:
            return None
        if rng.random() < 0.35:  # cursor inside the line
            start = rng.randrange(start, end)
        return Example(kind, text[:start], text[start:end], text[end:])
    if kind == "multi_line":
        n = rng.randint(2, 6)
        i = rng.randrange(len(lines) - 1)
        j = min(i + n, len(lines) - 1)
        start, end = _code_start(text, lines[i]), lines[j] - 1
        if end <= start or end - start > max_middle_chars:
            return None
        return Example(kind, text[:start], text[start:end], text[end:])
    if kind == "block":
        if spans is None:
            if tree_root is None:
                return None
            spans = block_spans(text, tree_root)
        fit = [b for b in spans if 0 < b.end_byte - b.start_byte <= max_middle_chars]
        if not fit:
            return None
        b = rng.choice(fit)
        return Example(kind, text[: b.start], text[b.start: b.end], text[b.end:])
    start = rng.randrange(len(text) - 1)
    end = min(len(text), start + rng.randint(1, 200))
    return Example("span", text[:start], text[start:end], text[end:])


@dataclass
class Encoded:
    ids: list[int]
    prompt_len: int  # index of the first middle token
    middle_len: int  # padded to whole blocks
    teacher: bool = False  # the middle is the model's own answer (engine.train.distill)


def encode_example(tok: Tokenizer, sp: SpecialTokens, ex: Example, block: int,
                   max_prefix: int, max_suffix: int, max_middle: int,
                   rng: random.Random) -> Encoded | None:
    pre = tok.encode(ex.prefix[-max_prefix * 8:]).ids[-max_prefix:]
    suf_text = "" if rng.random() < 0.1 else ex.suffix[: max_suffix * 8]
    suf = tok.encode(suf_text).ids[:max_suffix]
    mid = tok.encode(ex.middle).ids
    if not mid or len(mid) + 1 > max_middle:
        return None
    mid = mid + [sp.end_of_middle]
    pad = (-len(mid)) % block
    mid = mid + [sp.end_of_middle] * pad
    ids = [sp.fim_suffix, *suf, sp.fim_prefix, *pre, sp.fim_middle]
    return Encoded(ids + mid, len(ids), len(mid))


MAX_PREFIX, MAX_SUFFIX, MAX_MIDDLE = 320, 128, 96  # tokens of an example's parts
MAX_POSITIONS = MAX_PREFIX + MAX_SUFFIX + MAX_MIDDLE + 16  # with the markers and end padding


class ExampleStream:
    """Endless, seeded stream of encoded examples from a list of texts."""

    def __init__(self, texts: list[str], weights: list[float], tok: Tokenizer, sp: SpecialTokens,
                 block: int, seed: int, max_prefix: int = MAX_PREFIX, max_suffix: int = MAX_SUFFIX,
                 max_middle: int = MAX_MIDDLE) -> None:
        self.texts, self.weights, self.tok, self.sp, self.block = texts, weights, tok, sp, block
        self.rng = random.Random(seed)
        self.parser = Parser(PY)
        self.limits = (max_prefix, max_suffix, max_middle)
        self.indices = range(len(texts))
        self._lines: dict[int, list[int]] = {}  # per text: line starts, block bodies (parsed once)
        self._spans: dict[int, list[Span]] = {}

    def next(self) -> Encoded:
        while True:
            i = self.rng.choices(self.indices, weights=self.weights)[0]
            text = self.texts[i]
            kind = self.rng.choices(KINDS, weights=KIND_WEIGHTS)[0]
            lines = self._lines.get(i)
            if lines is None:
                lines = self._lines[i] = _line_starts(text)
            spans = None
            if kind == "block":
                spans = self._spans.get(i)
                if spans is None:
                    spans = self._spans[i] = block_spans(text, self.parser.parse(text.encode("utf-8")).root_node)
            ex = cut_example(text, kind, self.rng, lines=lines, spans=spans)
            if ex is None:
                continue
            enc = encode_example(self.tok, self.sp, ex, self.block, *self.limits, rng=self.rng)
            if enc is not None:
                return enc


@dataclass
class Batch:
    idx: Tensor  # [B, T + N] clean tokens then noisy middle tokens
    pos: Tensor  # [B, T + N]
    kind: Tensor  # [B, T + N] INVALID padding, CLEAN, NOISY
    blk: Tensor  # [B, T + N] a noisy token's block start, -1 elsewhere
    mask: Tensor | None  # [B, 1, T + N, T + N]; None until `attach_mask` (on the device it runs on)
    ar_target: Tensor  # [B, T] next clean token, -100 where none
    ar_weight: Tensor  # [B, T]
    noisy_target: Tensor  # [B, N]
    noisy_weight: Tensor  # [B, N]
    n_clean: int
    certain: Tensor | None = None  # [B, N] bool: masked targets of teacher rows (certainty forcing)


def make_batch(rows: list[Encoded], sp: SpecialTokens, vocab: int, block: int, rng: torch.Generator,
               diffusion: bool, edit_noise: float = EDIT_NOISE, kept_weight: float = KEPT_WEIGHT,
               min_t: float = MIN_T, teacher_suffix: float = 0.0, with_mask: bool = True) -> Batch:
    """The batch of `rows`; `with_mask=False` leaves the [B, 1, L, L] attention mask (most of
    the CPU time at a large batch) to `attach_mask` on the device the step runs on."""
    B = len(rows)
    T = max(len(r.ids) for r in rows)
    N = max(r.middle_len for r in rows) if diffusion else 0
    idx = torch.full((B, T + N), sp.pad, dtype=torch.long)
    pos = torch.zeros((B, T + N), dtype=torch.long)
    kind = torch.zeros((B, T + N), dtype=torch.long)  # INVALID padding, CLEAN, NOISY
    blk = torch.full((B, T + N), -1, dtype=torch.long)
    ar_t = torch.full((B, T), -100, dtype=torch.long)
    ar_w = torch.zeros((B, T))
    nz_t = torch.full((B, N), -100, dtype=torch.long)
    nz_w = torch.zeros((B, N))
    certain = torch.zeros((B, N), dtype=torch.bool)
    for b, r in enumerate(rows):
        L = len(r.ids)
        ids = torch.tensor(r.ids)
        idx[b, :L] = ids
        pos[b, :L] = torch.arange(L)
        kind[b, :L] = CLEAN
        ar_t[b, : L - 1] = ids[1:]
        ar_w[b, : L - 1] = 1.0
        ar_w[b, r.prompt_len - 1: L - 1] = 2.0  # middle tokens matter most
        if not diffusion:
            continue
        P, M = r.prompt_len, r.middle_len
        clean_mid = ids[P:]
        noisy = clean_mid.clone()
        for s in range(0, M, block):
            t = float(torch.rand((), generator=rng)) * (1 - min_t) + min_t
            u = torch.rand(block, generator=rng)
            masked = u < t
            if r.teacher and float(torch.rand((), generator=rng)) < teacher_suffix:
                # as a left-to-right decode leaves a block: the first k tokens known, the rest masked
                k = int(torch.randint(0, block, (), generator=rng))
                masked = torch.arange(block) >= k
                t = max((block - k) / block, min_t)
            edited = (~masked) & (torch.rand(block, generator=rng) < edit_noise)
            seg = slice(s, s + block)
            noisy[seg][masked] = sp.mask
            rand_tok = torch.randint(N_SPECIAL, vocab, (block,), generator=rng)
            noisy[seg][edited] = rand_tok[edited]
            # shifted logits: noisy output at j predicts token j+1 inside the block
            w = torch.where(masked, 1.0 / t, torch.where(edited, 1.0, kept_weight))
            nz_t[b, s: s + block - 1] = clean_mid[s + 1: s + block]
            nz_w[b, s: s + block - 1] = w[1:]
            if r.teacher:
                certain[b, s: s + block - 1] = masked[1:]
        idx[b, T: T + M] = noisy
        pos[b, T: T + M] = torch.arange(P, P + M)
        kind[b, T: T + M] = NOISY
        blk[b, T: T + M] = P + (torch.arange(M) // block) * block
    nz_w = nz_w / max(1, sum(r.middle_len for r in rows)) * B
    out = Batch(idx, pos, kind, blk, None, ar_t, ar_w, nz_t, nz_w, T, certain if bool(certain.any()) else None)
    return attach_mask(out) if with_mask else out


def attach_mask(b: Batch) -> Batch:
    """`b` with its attention mask, built on the device its tensors are on."""
    if b.mask is not None:
        return b
    m = layout_mask(b.kind, b.pos, b.blk, b.kind, b.pos, b.blk)
    m = m | torch.eye(b.idx.shape[1], dtype=torch.bool, device=m.device)[None, None]  # padding reads itself
    return replace(b, mask=m)
