"""The FAKE SGLang server as a process (tests and benches only): prints `{"port", "url"}` once
it listens, then serves until killed.

    python -m tests.fakes.sglang_cli --port 0 --block-delay-ms 40 --reply-file F --tokenizer DIR
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Sequence
from pathlib import Path

from tests.fakes.sglang import Codec, FakeSglang


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description="Fake SGLang 0.5.23 dLLM server (tests and benches only).")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--model-path", default="inclusionAI/LLaDA2.0-mini")
    ap.add_argument("--tokenizer", default=None, help="directory holding tokenizer.json")
    ap.add_argument("--reply", default="", help="reply text of every request")
    ap.add_argument("--reply-file", default=None, help="file whose text is the reply")
    ap.add_argument("--end-token", default=None, help="end token (text, looked up in the tokenizer, or an id)")
    ap.add_argument("--block-size", type=int, default=32)
    ap.add_argument("--block-delay-ms", type=float, default=40.0)
    ap.add_argument("--prefill-delay-ms", type=float, default=None, help="a prefill round (default: the block delay)")
    ap.add_argument("--load-s", type=float, default=0.0, help="refuse connections this long (the model loads)")
    ap.add_argument("--max-running-requests", type=int, default=None)
    ap.add_argument("--dllm-algorithm", default="LowConfidence")
    ap.add_argument("--dllm-fdfo", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--fdfo-stall-every", type=int, default=0,
                    help="under FDFO, a row's block stays unresolved on every Nth round (0: never)")
    ap.add_argument("--incremental-streaming-output", action="store_true")
    ap.add_argument("--start-delay-s", type=float, default=0.0)
    return ap


def fake_from_args(args: argparse.Namespace) -> FakeSglang:
    reply = Path(args.reply_file).read_text() if args.reply_file else args.reply
    codec = Codec(args.tokenizer)
    end: int | None = None
    if args.end_token is not None:
        end = int(args.end_token) if args.end_token.isdigit() else codec.token_id(args.end_token)
    every = args.fdfo_stall_every
    stall = (lambda _rid, n: n % every == 0) if every > 0 else None
    return FakeSglang(
        reply=reply, tokenizer=args.tokenizer, end_token_id=end, block_size=args.block_size,
        block_delay_ms=args.block_delay_ms, prefill_delay_ms=args.prefill_delay_ms, load_s=args.load_s,
        max_running_requests=args.max_running_requests,
        fdfo=args.dllm_fdfo, stall=stall, incremental_streaming_output=args.incremental_streaming_output,
        model_path=args.model_path, dllm_algorithm=args.dllm_algorithm, start_delay_s=args.start_delay_s,
    )


async def _serve(args: argparse.Namespace) -> None:
    fake = fake_from_args(args)
    url = await fake.start(args.host, args.port)
    print(json.dumps({"port": fake.port, "url": url}), flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        await fake.stop()


def main(argv: Sequence[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    try:
        asyncio.run(_serve(args))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
