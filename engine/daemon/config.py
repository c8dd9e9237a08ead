"""The daemon's settings (`llada-engine serve`'s flags), read by the daemon
(`engine.daemon.server`) and by each of its connections (`engine.daemon.connection`).
No torch here."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from engine.daemon import protocol as P
from engine.daemon.lifetime import DEFAULT_IDLE_EXIT_S


@dataclass
class DaemonConfig:
    host: str = "127.0.0.1"
    port: int = 0
    token: str | None = None
    max_batch: int = 8
    max_prompt_tokens: int = 448
    max_prompt_chars: int | None = None  # default: max(server.MIN_PROMPT_CHARS, 32 x max_prompt_tokens)
    max_new_tokens: int = 512
    max_message_bytes: int = P.DEFAULT_MAX_MESSAGE
    deadline_s: float = 600.0  # the longest; clients send their own (llada_lsp.engines.pace)
    register: bool = True  # write the per-user runtime file
    runtime_dir: Path | None = None
    idle_exit_s: float = DEFAULT_IDLE_EXIT_S  # no client and no request for this long: exit (0: never; engine.daemon.lifetime)
    max_connections: int = 64  # authenticated connections; more get HTTP 503 at the handshake
    preauth_connections: int = 16  # connections not (yet) authenticated, in all; more: 503
    preauth_per_address: int = 4  # of those, from one address
    hello_timeout_s: float = 10.0  # to authenticate (token daemons), else close 1008
    preauth_messages: int = 4  # messages answered before authentication; one more: close 1008
    preauth_bytes: int = 16_384  # largest frame before authentication (larger: close 1009)
    max_backlog_bytes: int = 8 << 20  # replies queued unread; more: close 1013 (slow reader)
    close_timeout_s: float = 2.0  # a close handshake longer than this drops the TCP connection
