"""`llada-lsp`: run the language server (stdio by default), `llada-lsp demo`, or
`llada-lsp doctor` (check the configured backend). Engine flags (`--engine`, `--model`,
`--sglang-url`, `--sglang-router`) set the server's defaults; the editor's
initializationOptions override them."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

from engine.presets import MODES
from llada_lsp import __version__


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="llada-lsp",
        description="Language server with block-diffusion code completion. "
                    "Run `llada-lsp demo --help` for the demo client.")
    p.add_argument("--version", action="version", version=f"llada-lsp {__version__}")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--stdio", action="store_true", help="talk over stdin/stdout (default)")
    mode.add_argument("--tcp", action="store_true", help="listen on TCP (debugging)")
    mode.add_argument("--ws", action="store_true", help="listen on a websocket (debugging)")
    p.add_argument("--host", default="127.0.0.1", help="address for --tcp/--ws")
    p.add_argument("--port", type=int, default=2087, help="port for --tcp/--ws")
    p.add_argument("--log-file", help="write the log to this file (stderr otherwise)")
    p.add_argument("-v", "--verbose", action="count", default=0,
                   help="more logging: -v info, -vv debug")
    engine_flags(p)
    return p


def engine_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("engine (defaults of the options of the same names, docs/lsp.md)")
    g.add_argument("--engine", help="inprocess | auto | ws://host:port | sglang")
    g.add_argument("--model", help="model directory or cached Hugging Face repo id (sglang: its tokenizer)")
    g.add_argument("--mode", choices=MODES, help="the preset each request names")
    g.add_argument("--sglang-url", action="append", default=[], metavar="PRESET=URL",
                   help="an SGLang server of a preset, e.g. speedy=http://gpu1:30000 (repeat to load-balance)")
    g.add_argument("--sglang-router", metavar="URL", help="an sglang-router for the presets not given by --sglang-url")
    g.add_argument("--max-prompt-tokens", type=int, help="prompt budget in tokens")


def options_from(args: argparse.Namespace) -> dict[str, Any]:
    """The engine flags as an options dict (only the flags given)."""
    opts: dict[str, Any] = {k: v for k, v in (("engine", args.engine), ("model", args.model), ("mode", args.mode),
                                              ("maxPromptTokens", args.max_prompt_tokens)) if v is not None}
    urls: dict[str, list[str]] = {}
    for item in args.sglang_url:
        preset, sep, url = item.partition("=")
        if not sep or not preset or not url:
            raise SystemExit(f"llada-lsp: --sglang-url wants PRESET=URL, got {item!r}")
        urls.setdefault(preset, []).append(url)
    sglang: dict[str, Any] = {"urls": urls} if urls else {}
    if args.sglang_router:
        sglang["router"] = args.sglang_router
    if sglang:
        opts["sglang"] = sglang
        opts.setdefault("engine", "sglang")
    return opts


def parsed_options(args: argparse.Namespace) -> Any:
    from llada_lsp.options import OptionsError, parse_options

    try:
        opts, warnings = parse_options(options_from(args))
    except OptionsError as e:
        raise SystemExit(f"llada-lsp: {e}") from e
    for w in warnings:
        print(f"llada-lsp: warning: {w}", file=sys.stderr)
    return opts


def doctor_main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="llada-lsp doctor",
                                description="Check the configured backend: tokenizer, servers, model family, "
                                            "one round trip. Exits 1 when a check fails.")
    engine_flags(p)
    from llada_lsp.doctor import run

    return run(parsed_options(p.parse_args(argv)))


def setup_logging(verbose: int, log_file: str | None) -> None:
    level = logging.WARNING if verbose <= 0 else logging.INFO if verbose == 1 else logging.DEBUG
    handler: logging.Handler = (logging.FileHandler(log_file, encoding="utf-8") if log_file
                                else logging.StreamHandler(sys.stderr))
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # pygls logs every message it sends at info level: only with -vvv
    logging.getLogger("pygls").setLevel(logging.DEBUG if verbose >= 3 else logging.WARNING)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "demo":
        from llada_lsp.demo import main as demo_main

        return demo_main(argv[1:])
    if argv and argv[0] == "doctor":
        return doctor_main(argv[1:])
    args = _parser().parse_args(argv)
    defaults = parsed_options(args)
    setup_logging(args.verbose, args.log_file)
    from llada_lsp.lsp.methods import build
    from llada_lsp.lsp.stdio import serve_stdio

    # The in-process engine thread holds the GIL between torch calls: a short switch
    # interval lets the event loop answer the editor within ~1 ms instead of up to 5 ms.
    sys.setswitchinterval(0.001)
    ls = build()
    ls.options = defaults  # the editor's initializationOptions apply over these
    if args.tcp:
        ls.start_tcp(args.host, args.port)
    elif args.ws:
        ls.start_ws(args.host, args.port)
    else:
        serve_stdio(ls)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
