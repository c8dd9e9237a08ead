"""What a Neovim draws: `nvim --embed` with a UI attached, its screen kept as a grid.

A small msgpack-RPC client: requests from the test's thread, and a reader thread that takes
the responses and the `redraw` notifications (`ext_linegrid`: `grid_line`, `grid_clear`,
`grid_scroll`, `grid_resize`, `hl_attr_define`) into a grid of cells (text and highlight id),
published at each `flush`. `wait_until` polls the published screen with a timeout.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

import msgpack

from tests.procs import stop_process

T = TypeVar("T")


class NvimError(RuntimeError):
    pass


class Screen:
    def __init__(self, nvim: str, args: list[str], env: dict[str, str], width: int = 100,
                 height: int = 20, rgb: bool = True) -> None:
        self.proc = subprocess.Popen([nvim, "--embed", *args], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, env={**os.environ, **env})
        self.width, self.height = width, height
        self._ids = iter(range(1, 1 << 30))
        self._lock = threading.Condition()
        self._replies: dict[int, tuple[Any, Any]] = {}
        self._cells = [[(" ", 0)] * width for _ in range(height)]
        self.rows: list[list[tuple[str, int]]] = [list(r) for r in self._cells]  # at the last flush
        self.attrs: dict[int, dict[str, Any]] = {0: {}}
        self.cterm_attrs: dict[int, dict[str, Any]] = {0: {}}  # what a 256-colour terminal draws
        self.watched: dict[int, list[str]] = {}  # row -> each distinct text it had at a flush
        self.flushes = 0
        self.closed = False
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.request("nvim_ui_attach", width, height, {"ext_linegrid": True, "rgb": rgb})

    # -- RPC ------------------------------------------------------------------------------------
    def request(self, method: str, *args: Any, timeout: float = 30.0) -> Any:
        msgid = next(self._ids)
        assert self.proc.stdin is not None
        self.proc.stdin.write(msgpack.packb([0, msgid, method, list(args)]))
        self.proc.stdin.flush()
        with self._lock:
            if not self._lock.wait_for(lambda: msgid in self._replies or self.closed, timeout):
                raise TimeoutError(f"{method}: no reply in {timeout}s")
            if msgid not in self._replies:
                raise NvimError(f"{method}: nvim exited")
            err, result = self._replies.pop(msgid)
        if err is not None:
            raise NvimError(f"{method}: {err}")
        return result

    def lua(self, code: str, *args: Any) -> Any:
        return self.request("nvim_exec_lua", code, list(args))

    def command(self, cmd: str) -> None:
        self.request("nvim_command", cmd)

    def input(self, keys: str) -> None:
        self.request("nvim_input", keys)

    def close(self) -> None:
        stop_process(self.proc, 10)

    def _read(self) -> None:
        assert self.proc.stdout is not None
        unpacker = msgpack.Unpacker(raw=False, strict_map_key=False)
        while True:
            data = self.proc.stdout.read1(65536)
            if not data:
                break
            unpacker.feed(data)
            for msg in unpacker:
                if msg[0] == 1:
                    with self._lock:
                        self._replies[msg[1]] = (msg[2], msg[3])
                        self._lock.notify_all()
                elif msg[0] == 2 and msg[1] == "redraw":
                    for batch in msg[2]:
                        self._redraw(batch[0], batch[1:])
                elif msg[0] == 0:  # a request from nvim (none expected): answer it, empty
                    assert self.proc.stdin is not None
                    self.proc.stdin.write(msgpack.packb([1, msg[1], "not handled", None]))
                    self.proc.stdin.flush()
        with self._lock:
            self.closed = True
            self._lock.notify_all()

    # -- the grid -------------------------------------------------------------------------------
    def _redraw(self, name: str, calls: list[list[Any]]) -> None:
        for a in calls:
            if name == "grid_resize":
                _, w, h = a
                self.width, self.height = w, h
                self._cells = [[(" ", 0)] * w for _ in range(h)]
            elif name == "grid_clear":
                self._cells = [[(" ", 0)] * self.width for _ in range(self.height)]
            elif name == "grid_line":
                _, row, col, cells = a[:4]
                hl = 0
                for cell in cells:
                    text = cell[0]
                    if len(cell) > 1:
                        hl = cell[1]
                    for _ in range(cell[2] if len(cell) > 2 else 1):
                        if 0 <= row < self.height and col < self.width:
                            self._cells[row][col] = (text, hl)
                        col += 1
            elif name == "grid_scroll":
                _, top, bot, left, right, rows, _cols = a
                src = [list(r) for r in self._cells]
                for r in range(top, bot):
                    s = r + rows
                    if top <= s < bot:
                        self._cells[r][left:right] = src[s][left:right]
            elif name == "hl_attr_define":
                self.attrs[a[0]] = a[1]
                self.cterm_attrs[a[0]] = a[2]
            elif name == "flush":
                with self._lock:
                    self.rows = [list(r) for r in self._cells]
                    self.flushes += 1
                    for row, seen in self.watched.items():
                        text = "".join(t for t, _ in self.rows[row]).rstrip()
                        if not seen or seen[-1] != text:
                            seen.append(text)
                    self._lock.notify_all()

    def row_text(self, row: int) -> str:
        """The row as drawn ("" cells of double-width characters skipped), right-stripped."""
        with self._lock:
            return "".join(t for t, _ in self.rows[row]).rstrip()

    def text(self) -> list[str]:
        return [self.row_text(r) for r in range(len(self.rows))]

    def row_cells(self, row: int, cterm: bool = False) -> list[tuple[str, dict[str, Any]]]:
        """The row's cells with their attributes: the RGB ones, or (`cterm`) those a terminal
        without 'termguicolors' draws."""
        attrs = self.cterm_attrs if cterm else self.attrs
        with self._lock:
            return [(t, attrs.get(h, {})) for t, h in self.rows[row] if t != ""]

    def watch(self, row: int) -> list[str]:
        """From now on, every distinct text `row` has at a flush (the list fills as they come)."""
        with self._lock:
            self.watched[row] = ["".join(t for t, _ in self.rows[row]).rstrip()]
            return self.watched[row]

    def wait_until(self, what: str, fn: Callable[[], T | None], timeout: float) -> T:
        """Poll `fn` at each flush (and every 50 ms) until it returns a truthy value."""
        deadline = time.monotonic() + timeout
        while True:
            value = fn()
            if value:
                return value
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"timed out after {timeout}s waiting for {what}; screen:\n"
                                   + "\n".join(self.text()))
            with self._lock:
                n = self.flushes
                self._lock.wait_for(lambda n=n: self.flushes != n or self.closed, min(left, 0.05))
