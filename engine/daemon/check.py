"""`llada-engine check MODEL`: what a load would be, without loading any weight.

Prints the family, the prompt format and its template, the tokenizer's and the embedding's
sizes, the special ids, the dtype and the memory plan (engine.model.memory); exits 3 when the
plan does not fit (the message says what would), 2 when the checkpoint cannot be read.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from typing import Any

EXIT_DOES_NOT_FIT = 3


def describe(model: str, dtype: str = "auto", device: str = "cpu", max_len: int | None = None,
             prompt_format: str = "auto", available: int | None = None,
             trust_remote_code: bool = False) -> dict[str, Any]:
    from engine.model.adapters import find_family
    from engine.model.loader import (
        dtype_choice,
        end_id_sources,
        no_adapter_message,
        resolve,
        resolve_dtype,
        special_ids,
    )
    from engine.model.memory import plan, stored_dtype
    from engine.prompt.tokenizer import load_prompt_format, load_tokenizer
    from engine.service import EMBEDDED_MAX_LEN, REAL_MAX_LEN

    path = resolve(model)
    cfg = json.loads((path / "config.json").read_text(encoding="utf-8"))
    embedded = cfg.get("model_type") == "llada_lsp"
    family = None if embedded else find_family(cfg)
    fam = "embedded" if embedded else (family.name if family else "remote (--trust-remote-code)")
    if family is not None:
        family.config_check(cfg)  # refuses a config key the adapter does not implement
    elif not embedded and not trust_remote_code:
        raise ValueError(no_adapter_message(path, cfg))
    tok = load_tokenizer(path)
    if embedded:
        from engine.prompt.tokenizer import special_tokens_of

        special = special_tokens_of(tok)
    else:
        special = special_ids(path, cfg)
    fim = min(special.fim_prefix, special.fim_suffix, special.fim_middle) >= 0
    fmt = load_prompt_format(path, tok, fim, None, prompt_format)
    turn_ends = {t: i for t in fmt.end_texts if (i := tok.token_to_id(t)) is not None}
    ends = end_id_sources(path, cfg, special, turn_ends, pad_ends=not embedded)
    rows = int(cfg.get("embedding_size") or cfg.get("vocab_size") or 0)
    ctx = int(cfg.get("max_position_embeddings") or cfg.get("max_sequence_length") or cfg.get("max_seq_len") or 0)
    tokens = min(max_len or (EMBEDDED_MAX_LEN if embedded else REAL_MAX_LEN), ctx or 1 << 30)
    chosen, why = (dtype_choice(cfg, device, path, tokens, available) if dtype == "auto"
                   else (resolve_dtype(dtype, device), ""))
    dt = str(chosen).removeprefix("torch.")
    stored = cfg.get("torch_dtype") or cfg.get("dtype") or stored_dtype(path)
    p = plan(path, cfg, dt, device, tokens, available)
    return {"path": str(path), "family": fam, "model_type": cfg.get("model_type"),
            "prompt_format": fmt.kind, "prompt_reason": fmt.reason, "template": fmt.source or "",
            "turn_end": list(fmt.end_texts),
            "tokenizer_tokens": tok.get_vocab_size(), "embedding_rows": rows,
            "special": dataclasses.asdict(special), "end_ids": sorted(ends), "end_sources": ends,
            "stored_dtype": stored, "dtype": dt, "dtype_reason": why, "device": device,
            "plan": p, "fits": p.fits}


def cmd_check(args: argparse.Namespace) -> int:
    avail = int(args.available_gib * (1 << 30)) if args.available_gib is not None else None
    try:
        d = describe(args.model, args.dtype, args.device, args.max_len, args.prompt_format, avail,
                     args.trust_remote_code)
    except (OSError, ValueError) as e:
        print(f"llada-engine check: cannot read {args.model}: {e}", file=sys.stderr)
        return 2
    p = d.pop("plan")
    if args.json:
        print(json.dumps(d | {"plan": dataclasses.asdict(p), "needs": p.total}))
    else:
        print(f"model        {d['path']}")
        print(f"family       {d['family']} (model_type {d['model_type']!r})")
        print(f"prompt       {d['prompt_format']}" + (f" from {d['template']}" if d["template"] else "")
              + (f", turn end {d['turn_end']}" if d["turn_end"] else ""))
        print(f"  because    {d['prompt_reason']}")
        print(f"vocabulary   tokenizer {d['tokenizer_tokens']} tokens, embedding {d['embedding_rows']} rows"
              + (f" ({d['embedding_rows'] - d['tokenizer_tokens']} padding rows)"
                 if d["embedding_rows"] > d["tokenizer_tokens"] else ""))
        print("special      " + ", ".join(f"{k} {v}" for k, v in d["special"].items() if v >= 0)
              + f"; decoding ends at {d['end_ids']}")
        for i, sources in sorted(d["end_sources"].items()):
            print(f"  ends at    {i}: " + "; ".join(sources))
        print(f"dtype        {d['dtype']} on {d['device']} (stored: {d['stored_dtype']})")
        if d["dtype_reason"]:
            print(f"  because    {d['dtype_reason']}")
        for line in p.lines():
            print(f"memory       {line}")
    if not p.fits:
        print(f"llada-engine check: does not fit. {p.advice()}", file=sys.stderr)
        return EXIT_DOES_NOT_FIT
    return 0


def add_check_parser(sub: Any) -> None:  # noqa: ANN401 - argparse's private subparsers type
    k = sub.add_parser("check", help="print what loading MODEL would be (format, vocabulary, special ids, dtype, "
                       "memory plan) without loading its weights")
    k.add_argument("model", help="model directory, packaged name, or Hugging Face repo id in the local cache")
    k.add_argument("--dtype", default="auto", help="auto (the checkpoint's own) | float32 | bfloat16 | float16")
    k.add_argument("--device", default="cpu", help="cpu | cuda")
    k.add_argument("--max-len", type=int, help="cache positions planned (default: the engine's canvas)")
    k.add_argument("--prompt-format", default="auto", choices=["auto", "chat", "plain"])
    k.add_argument("--available-gib", type=float, help="plan against this much free memory instead of the device's")
    k.add_argument("--trust-remote-code", action="store_true",
                   help="describe a checkpoint without a native adapter (its own code would run at load)")
    k.add_argument("--json", action="store_true")
    k.set_defaults(fn=cmd_check)

