"""`llada-lsp`: run the language server (stdio by default), or `llada-lsp demo`."""

from __future__ import annotations

import argparse
import logging
import sys

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
    return p


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
    args = _parser().parse_args(argv)
    setup_logging(args.verbose, args.log_file)
    from llada_lsp.server import build
    from llada_lsp.stdio import serve_stdio

    # The in-process engine thread holds the GIL between torch calls: a short switch
    # interval lets the event loop answer the editor within ~1 ms instead of up to 5 ms.
    sys.setswitchinterval(0.001)
    ls = build()
    if args.tcp:
        ls.start_tcp(args.host, args.port)
    elif args.ws:
        ls.start_ws(args.host, args.port)
    else:
        serve_stdio(ls)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
