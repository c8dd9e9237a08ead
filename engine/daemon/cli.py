"""`llada-engine`: the engine's command line.

    llada-engine complete FILE --line N [--col C]   complete at a position, showing every step
    llada-engine serve [--model M] [--host H] [--port N] [--token-file F] ...
                                                    load a model and serve it (the daemon)
    llada-engine status [--json]                    the user's daemon: address, model, load
    llada-engine stop [--hold S]                    stop the user's daemon; editors do not start it
                                                    again until restarted (or for S seconds)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from engine.api import CompletionRequest, Plan
from engine.daemon.lifetime import DEFAULT_IDLE_EXIT_S
from engine.presets import DEFAULT_PRESET

if TYPE_CHECKING:
    import torch


def _position(text: str, line: int, col: int | None) -> int:
    lines = text.split("\n")
    if not 1 <= line <= len(lines):
        raise SystemExit(f"line {line} is outside the file (1..{len(lines)})")
    c = len(lines[line - 1]) if col is None else col
    return sum(len(s) + 1 for s in lines[: line - 1]) + min(c, len(lines[line - 1]))


def cmd_complete(args: argparse.Namespace) -> int:
    from engine.service import TextEngine

    text = Path(args.file).read_text(encoding="utf-8")
    at = _position(text, args.line, args.col)
    t0 = time.perf_counter()
    try:
        eng = TextEngine(args.model, preset=args.mode, trust_remote_code=args.trust_remote_code,
                         max_prompt_tokens=args.max_prompt_tokens, prompt_template=args.prompt_template,
                         prompt_format=args.prompt_format)
    except (OSError, ValueError) as e:  # a refused or unreadable checkpoint: its one-line reason
        print(f"llada-engine complete: cannot load the model {args.model or '(default)'}: {e}", file=sys.stderr)
        return 2
    print(f"model {eng.info()['model']} loaded in {(time.perf_counter() - t0) * 1000:.0f} ms", file=sys.stderr)
    plan = Plan(max_tokens=args.max_tokens, stop=args.stop, preset=args.mode)
    req = CompletionRequest("cli-1", str(args.file), text[:at], text[at:], plan)
    for ev in eng.complete(req):
        if ev.kind == "done":
            s = ev.stats or {}
            print(f"done ({ev.reason}): {s.get('forwards')} forwards, {s.get('tokens')} tokens, "
                  f"TPF {s.get('tpf', 0):.2f}, first draft {s.get('first_draft_ms', 0):.0f} ms, "
                  f"total {s.get('total_ms', 0):.0f} ms")
            for i, alt in enumerate(ev.alternatives, 2):
                print(f"alternative {i}: {alt!r}")
            print("---\n" + text[:at] + "\x1b[32m" + ev.text + "\x1b[0m" + text[at:][:200])
        else:
            tag = "draft" if ev.kind == "draft" else "edit "
            print(f"[{ev.step:3d}] {tag}{'*' if ev.draft_complete else ' '} {ev.text!r}")
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    from engine.daemon import runtime

    os.environ["HF_HUB_OFFLINE"] = "1"  # never fetch anything at run time
    try:
        model_dir = runtime.resolve_model(args.model)
        token = _serve_token(args)
    except (runtime.ModelNotFound, runtime.DaemonError) as e:
        print(f"llada-engine: {e}", file=sys.stderr)
        return 2
    if not runtime.is_loopback(args.host) and not token:
        print(f"llada-engine: refusing to listen on {args.host} without a token: drop --no-token "
              "(only 127.0.0.1 may be served without one)", file=sys.stderr)
        return 2
    register = not args.no_register
    if register:
        live = runtime.live_daemon()
        if live is not None:
            print(f"llada-engine: a daemon is already running (pid {live['pid']}, {live['url']}); "
                  "`llada-engine stop` it or pass --no-register", file=sys.stderr)
            return 1
        from engine.daemon import lifetime

        lifetime.release_hold(runtime.runtime_dir())  # started by hand: an explicit start
    return _serve(args, model_dir, token, register)


def _serve_token(args: argparse.Namespace) -> str | None:
    """The clients' token: from --token-file, else the runtime dir's `token` file (both created
    0600 with a random token when missing); None only with --no-token."""
    from engine.daemon import runtime

    if args.no_token:
        if args.token_file:
            raise runtime.DaemonError("--no-token and --token-file contradict each other")
        return None
    path = Path(args.token_file) if args.token_file else runtime.default_token_file()
    return runtime.read_token(path, create=True)


def default_cpu_threads(cores: int, dtype: torch.dtype) -> int:
    """The most torch threads the daemon uses on the CPU when `--threads` is not given (within
    that, engine.model.threads keeps the count whose measured step time is lowest). float32 forwards
    are compute-bound and use every core (on 2 AVX2 cores, 2 threads served 1.3x more than 1,
    batched and one at a time); bfloat16 on AMX is fast enough that threads sharing a core
    with the event loop stall at every barrier, so one core is left to it (on 2 cores, 1
    thread served ~1.4x more)."""
    import torch

    return max(1, cores if dtype == torch.float32 else cores - 1)


def _serve(args: argparse.Namespace, model_dir: Path, token: str | None, register: bool) -> int:
    import logging

    from tqdm import tqdm

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("websockets").setLevel(logging.WARNING)
    bar = tqdm(total=4, desc="loading", unit="step", file=sys.stderr, dynamic_ncols=True)
    bar.set_postfix_str("importing torch")
    from engine.daemon.server import Daemon, DaemonConfig
    from engine.service import TextEngine

    bar.update(1)
    bar.set_postfix_str(f"reading {model_dir}")
    if args.device == "auto":
        import torch

        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        limits = {"max_prompt_tokens": args.max_prompt_tokens} if args.max_prompt_tokens else {}
        from engine.model.loader import resolve_dtype

        dtype = resolve_dtype(args.dtype, args.device, model_dir)
        cap = None
        if args.threads is None and args.device == "cpu":
            from engine.model.threads import usable_cpus

            cap = default_cpu_threads(usable_cpus(), dtype)
        engine = TextEngine(model_dir, preset=args.mode, device=args.device, threads=args.threads, max_threads=cap,
                            trust_remote_code=args.trust_remote_code, dtype=dtype,
                            prompt_template=args.prompt_template, prompt_format=args.prompt_format, **limits)
    except (OSError, ValueError) as e:
        bar.close()
        print(f"llada-engine: cannot load the model at {model_dir}: {e}", file=sys.stderr)
        return 2
    bar.update(1)
    bar.set_postfix_str(f"allocating the cache for {args.max_batch} requests")
    cfg = DaemonConfig(host=args.host, port=args.port, token=token, max_batch=args.max_batch,
                       max_prompt_tokens=engine.max_prompt_tokens, max_prompt_chars=args.max_prompt_chars,
                       max_new_tokens=args.max_new_tokens,
                       max_message_bytes=args.max_message_bytes, deadline_s=args.deadline_ms / 1000,
                       register=register, idle_exit_s=args.idle_exit)
    daemon = Daemon(engine, cfg)
    # one entry per client typing in a document, with slack
    engine.prompt_cache.max_entries = args.prompt_cache if args.prompt_cache is not None \
        else max(engine.prompt_cache.max_entries, 2 * args.max_batch)
    bar.update(1)
    bar.set_postfix_str("warming up")
    daemon.warmup()
    bar.update(1)
    bar.close()

    def ready(url: str) -> None:
        print(f"llada-engine: serving {engine.info()['model']} ({model_dir}) on {url} (pid {os.getpid()}, "
              f"max batch {args.max_batch}, {engine.info()['dtype']} on {args.device}"
              f"{f', {engine.threads.threads} threads' if args.device == 'cpu' else ''}"
              f"{' (measured, re-checked)' if args.device == 'cpu' and not args.threads else ''}"
              f"{', token required' if token else ''})", flush=True)

    daemon.serve_in_main_thread(ready)  # the forwards on the main thread: see Scheduler.run
    print("llada-engine: stopped", flush=True)
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    from engine.daemon import runtime

    info = runtime.read_runtime()
    if info is None:
        print(f"no engine daemon is registered ({runtime.runtime_file()})")
        return 1
    if not runtime.pid_alive(int(info["pid"])):
        runtime.remove_runtime(int(info["pid"]))
        print(f"no engine daemon is running (removed the stale runtime file of pid {info['pid']})")
        return 1
    stats = runtime.probe(str(info["url"]), info.get("token"), kind="stats")
    if args.json:
        print(json.dumps({"runtime": {k: v for k, v in info.items() if k != "token"},
                          "stats": stats and stats.get("stats")}))
        return 0 if stats else 1
    print(f"engine daemon pid {info['pid']} at {info['url']}: model {info.get('model')} ({info.get('model_path')})")
    if stats is None:
        print("  not answering (still starting, or hung)")
        return 1
    s = stats["stats"]
    print(f"  up {s['uptime_s']:.0f} s, {s['connections']} connections, {s['running']}/{s['max_batch']} running; "
          f"{s['completed']:.0f} completed, {s['cancelled']:.0f} cancelled, "
          f"{s['busy']:.0f} busy, {s['errors']:.0f} errors; avg batch {s['avg_batch']:.2f}")
    return 0


def cmd_stop(args: argparse.Namespace) -> int:
    from engine.daemon import lifetime, runtime

    info = runtime.stop_daemon(timeout=args.timeout)
    if args.hold is None or args.hold > 0:
        lifetime.set_hold(runtime.runtime_dir(), args.hold)
    until = ("until restarted (:LladaRestart in Neovim, or `llada-engine serve`)" if args.hold is None
             else f"for {args.hold:.0f} s" if args.hold > 0 else "")
    if info is None:
        print("no engine daemon is running" + (f"; editors will not start one {until}" if until else ""))
        return 1
    print(f"stopped the engine daemon (pid {info['pid']}, {info['url']})"
          + (f"; editors will not start it again {until}" if until else ""))
    return 0


def _prompt_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--max-prompt-tokens", type=int, help="prompt tokens kept (default: the model's: 448 for the "
                   "embedded models, 4096 for real checkpoints, capped by their context)")
    p.add_argument("--prompt-template", metavar="FILE", help="a Jinja prompt template replacing the model's "
                   "prompt format (see docs/models.md)")
    p.add_argument("--prompt-format", default="auto", choices=["auto", "chat", "plain"],
                   help="auto: the checkpoint's files decide (chat when it ships a chat template, never its "
                   "path); chat / plain: force it (an instruct checkpoint is chat, a base one plain)")


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="llada-engine", description="The llada-lsp diffusion engine.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("complete", help="complete one position of a file, printing each step")
    c.add_argument("file")
    c.add_argument("--line", type=int, required=True, help="1-based line")
    c.add_argument("--col", type=int, help="0-based column (default: end of line)")
    c.add_argument("--model", help="model directory (default: the embedded model)")
    c.add_argument("--mode", default=DEFAULT_PRESET, help="speedy | quality | a policy preset")
    c.add_argument("--max-tokens", type=int, default=64)
    c.add_argument("--stop", default="none", choices=["none", "line", "dedent", "brace", "blank_line"])
    c.add_argument("--trust-remote-code", action="store_true",
                   help="allow a checkpoint's own modeling code for architectures without a native adapter")
    _prompt_flags(c)
    c.set_defaults(fn=cmd_complete)

    s = sub.add_parser("serve", help="load a model and serve it over websockets (the resident daemon)")
    s.add_argument("--model", help="model directory, packaged name, or Hugging Face repo id from the local "
                   "cache (default: the embedded model)")
    s.add_argument("--host", default="127.0.0.1", help="address to listen on (not loopback: --token-file needed)")
    s.add_argument("--port", type=int, default=0, help="port (default 0: any free port, see the runtime file)")
    s.add_argument("--token-file", help="file holding the clients' token (created 0600 with a random one if "
                   "missing; default: the runtime dir's `token`, which clients read from there)")
    s.add_argument("--no-token", action="store_true", help="serve loopback without a token: any local "
                   "process (not a web page: browser origins are always refused) may use the daemon")
    s.add_argument("--mode", default=DEFAULT_PRESET, help="the preset of a request whose plan names none: "
                   "speedy | quality | a policy preset")
    s.add_argument("--device", default="cpu", help="cpu | cuda | auto")
    s.add_argument("--threads", type=int, help="torch CPU threads, fixed (default on the CPU: the count whose measured step time is "
                   "lowest, re-checked while serving, at most all cores for float32 and all but one for bfloat16)")
    s.add_argument("--dtype", default="auto", help="auto | float32 | bfloat16 | float16 (auto: a real "
                   "checkpoint's own torch_dtype, bfloat16 for LLaDA2 / LLaDA-8B / Dream, on the CPU too; the "
                   "embedded models bfloat16 on a GPU or a CPU with AMX, float32 elsewhere)")
    s.add_argument("--max-batch", type=int, default=8, help="concurrent requests (cache rows); more get busy")
    _prompt_flags(s)
    s.add_argument("--max-prompt-chars", type=int, help="prefix + suffix characters above which a request "
                   "is refused (default: max(16384, 32 x prompt tokens)); below it prompts are trimmed")
    s.add_argument("--max-new-tokens", type=int, default=512, help="largest plan.max_tokens accepted")
    s.add_argument("--max-message-bytes", type=int, default=1 << 20)
    s.add_argument("--deadline-ms", type=int, default=600_000,
                   help="longest a request may run (clients send shorter deadlines of their own)")
    s.add_argument("--prompt-cache", type=int, help="prompt cache entries (default 2 x max batch; 0 disables it)")
    s.add_argument("--no-register", action="store_true", help="do not write the per-user runtime file")
    s.add_argument("--idle-exit", type=float, default=DEFAULT_IDLE_EXIT_S, metavar="SECONDS",
                   help="exit after this long with no client and no request (default 600; 0: never)")
    s.add_argument("--trust-remote-code", action="store_true",
                   help="allow a checkpoint's own modeling code for architectures without a native adapter")
    s.set_defaults(fn=cmd_serve)

    from engine.daemon.check import add_check_parser

    add_check_parser(sub)
    st = sub.add_parser("status", help="show the user's engine daemon")
    st.add_argument("--json", action="store_true")
    st.set_defaults(fn=cmd_status)
    sp = sub.add_parser("stop", help="stop the user's engine daemon")
    sp.add_argument("--timeout", type=float, default=20.0)
    sp.add_argument("--hold", type=float, metavar="SECONDS", help="editors may start the daemon again after "
                    "this long (default: only once restarted explicitly; 0: at once)")
    sp.set_defaults(fn=cmd_stop)
    return ap


def main(argv: list[str] | None = None) -> int:
    from engine.daemon.runtime import DaemonError

    args = build_parser().parse_args(argv)
    try:
        return int(args.fn(args))
    except DaemonError as e:  # a runtime dir that cannot be used, a daemon that cannot be reached
        print(f"llada-engine: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
