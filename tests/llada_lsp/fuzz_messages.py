"""Messages for the LSP protocol fuzz suite: valid LSP traffic and mutations of it.

`Generator(rnd).batch()` returns a few framed messages: valid requests and notifications
(documents with binary, huge and lone-surrogate text, invalid positions, unknown methods)
and mutations of valid frames (truncated or extended bodies, a wrong Content-Length,
damaged or missing headers, deep nesting, fields of the wrong type, random bytes). Each
mutation over-declares a body by at most `SLACK` bytes, so the `PAD` a test writes before
its probe always completes a pending body: the probe is never swallowed.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from typing import Any

SLACK = 64
PAD = b"\r\n" * (SLACK + 8)
METHODS = ["textDocument/inlineCompletion", "textDocument/completion", "llada/debugInfo",
           "workspace/executeCommand", "no/such/method", "llada/nothing", "$/cancelRequest",
           "textDocument/didOpen", "textDocument/didChange", "textDocument/didClose",
           "textDocument/didShowCompletion", "textDocument/didPartiallyAcceptCompletion",
           "workspace/didChangeConfiguration", "initialize", "$/setTrace", "initialized",
           "llada/nextEdit", "workspace/didChangeWorkspaceFolders"]
URIS = ["file:///fz/a.py", "file:///fz/b.ts", "file:///fz/c.rs", "file:///fz/none.py",
        "untitled:x", "", "file:///fz/é 😀.go"]


def frame(body: bytes, length: int | None = None) -> bytes:
    return b"Content-Length: %d\r\n\r\n" % (len(body) if length is None else length) + body


class Generator:
    def __init__(self, rnd: random.Random, first_id: int = 10_000) -> None:
        self.rnd = rnd
        self.next_id = first_id
        self.versions: dict[str, int] = {}

    # -- values -----------------------------------------------------------------------------
    def text(self) -> str:
        r = self.rnd
        kind = r.randrange(10)
        if kind == 0:
            return "".join(chr(r.randrange(0, 32)) for _ in range(r.randrange(200)))  # binary
        if kind == 1:
            return "\ud800x = '\udfff'\n" * r.randrange(1, 5)  # lone surrogates
        if kind == 2 and r.random() < 0.2:
            return "def f(x):\n    return x\n" * r.randrange(40_000, 60_000)  # ~1 MB
        if kind == 3:
            return "".join(chr(r.choice([r.randrange(0x20, 0x7f), r.randrange(0xa0, 0x2fff),
                                         r.randrange(0x10000, 0x1f600)]))
                           for _ in range(r.randrange(300)))
        lines = ["import os", "def f(a, b):", "    if a:", "        return b", "    ", "",
                 "class C {", "  x = 1;", "}", "fn main() {", "    let v = 1;", "// c", "\t"]
        return "\n".join(r.choice(lines) for _ in range(r.randrange(1, 60)))

    def value(self, depth: int = 0) -> Any:
        r = self.rnd
        kinds: list[Callable[[], Any]] = [
            lambda: None, lambda: r.random() < 0.5, lambda: r.randrange(-2**40, 2**40),
            lambda: r.random() * 1e308, lambda: self.text()[:40], lambda: -1, lambda: 2**31]
        if depth < 3:
            kinds += [lambda: [self.value(depth + 1) for _ in range(r.randrange(3))],
                      lambda: {r.choice(["uri", "line", "x", "id"]): self.value(depth + 1)}]
        return r.choice(kinds)()

    def position(self) -> dict[str, Any]:
        r = self.rnd
        pick = [lambda: r.randrange(0, 60), lambda: -r.randrange(1, 5), lambda: 2**31 - 1,
                lambda: r.randrange(0, 3)]
        return {"line": r.choice(pick)(), "character": r.choice(pick)()}

    # -- valid messages ---------------------------------------------------------------------
    def params(self, method: str) -> Any:
        r, uri = self.rnd, self.rnd.choice(URIS)
        pos = self.position()
        if method == "textDocument/didOpen":
            self.versions[uri] = 1
            return {"textDocument": {"uri": uri, "languageId": r.choice(
                ["python", "typescript", "rust", "cobol", ""]), "version": 1, "text": self.text()}}
        if method == "textDocument/didChange":
            self.versions[uri] = self.versions.get(uri, 1) + r.choice([1, 1, 0, -1])
            change: dict[str, Any] = {"text": self.text()[: r.randrange(1, 30)]}
            if r.random() < 0.8:
                change["range"] = {"start": pos, "end": self.position()}
            return {"textDocument": {"uri": uri, "version": self.versions[uri]},
                    "contentChanges": [change]}
        if method in ("textDocument/didClose", "textDocument/didShowCompletion"):
            return {"textDocument": {"uri": uri}, "item": {}}
        if method == "workspace/executeCommand":
            return {"command": "llada.acceptCompletion", "arguments": [self.value(), self.value()]}
        if method == "workspace/didChangeConfiguration":
            return {"settings": {"llada": {r.choice(["mode", "languages", "maxTokens"]): self.value()}}}
        if method == "$/cancelRequest":
            return {"id": r.randrange(self.next_id + 1)}
        if method == "initialize":
            return {"capabilities": {}}
        if method == "llada/nextEdit":
            doc: dict[str, Any] = {"uri": uri}
            if r.random() < 0.7:
                doc["version"] = self.versions.get(uri, 1) + r.choice([0, 0, -1, 1])
            out: dict[str, Any] = {"textDocument": doc, "position": pos}
            if r.random() < 0.5:
                out["range"] = {"start": self.position(), "end": self.position()}
            return out
        if method == "workspace/didChangeWorkspaceFolders":
            def folders() -> list[dict[str, str]]:
                return [{"uri": r.choice([*URIS, "file:///fz", "file:///fz/sub/"]), "name": "fz"}
                        for _ in range(r.randrange(3))]
            return {"event": {"added": folders(), "removed": folders()}}
        return {"textDocument": {"uri": uri}, "position": pos, "context": {"triggerKind": r.choice([1, 2, 3])}}

    def message(self) -> dict[str, Any]:
        method = self.rnd.choice(METHODS)
        m: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": self.params(method)}
        if not method.startswith(("textDocument/did", "$/", "workspace/didChange", "initialized")):
            self.next_id += 1
            m["id"] = self.next_id if self.rnd.random() < 0.9 else f"s{self.next_id}"
        return m

    # -- mutations --------------------------------------------------------------------------
    def wrong_type(self, m: dict[str, Any]) -> dict[str, Any]:
        m = json.loads(json.dumps(m))
        target, path = m, ["params"]
        while isinstance(target.get(path[-1]), dict) and target[path[-1]] and self.rnd.random() < 0.7:
            target = target[path[-1]]
            path.append(self.rnd.choice(list(target)))
        target[path[-1]] = self.value()
        if self.rnd.random() < 0.2:
            m[self.rnd.choice(["jsonrpc", "id", "method"])] = self.value()
        return m

    def mutate(self, body: bytes) -> bytes:
        r = self.rnd
        op = r.randrange(12)
        n = len(body)
        if op == 0:  # truncated body, honest length
            return frame(body[: r.randrange(n)])
        if op == 1:  # Content-Length too large
            return frame(body, n + r.randrange(1, SLACK))
        if op == 2:  # Content-Length too small
            return frame(body, max(0, n - r.randrange(1, min(n, SLACK) + 1)))
        if op == 3:  # extended body
            return frame(body + bytes(r.randrange(256) for _ in range(r.randrange(1, 20))))
        if op == 4:  # a damaged header
            head = r.choice([b"Content-Lenght: %d\r\n\r\n" % n, b"Content-Length %d\r\n\r\n" % n,
                             b"Content-Length: -%d\r\n\r\n" % n, b"Content-Length: 0x10\r\n\r\n",
                             b"content-length:%d\n\n" % n, b"Content-Length: %d\r\n" % n,
                             b"Content-Length: 99999999999999999999\r\n\r\n"])
            return head + body
        if op == 5:  # no header at all
            return body + b"\r\n"
        if op == 6:  # deep nesting
            d = r.randrange(100, 20_000)
            return frame(b'{"jsonrpc":"2.0","id":%d,"method":"llada/debugInfo","params":' % r.randrange(99)
                         + b"[" * d + b"]" * d + b"}")
        if op == 7:  # random bytes
            return frame(bytes(r.randrange(256) for _ in range(r.randrange(64))))
        if op == 8:  # invalid UTF-8 inside a valid frame
            i = r.randrange(n + 1)
            return frame(body[:i] + b"\xff\xfe\xed" + body[i:])
        if op == 9:  # a batch
            return frame(b"[" + body + b"," + body + b"]")
        if op == 10:  # junk lines between frames
            return b"garbage line\r\n" + b"\x00\x01" * r.randrange(5) + frame(body)
        return frame(json.dumps(self.wrong_type(json.loads(body))).encode())

    def batch(self) -> list[bytes]:
        """1 to 8 frames (as written), about a third of them mutated."""
        out = []
        for _ in range(self.rnd.randrange(1, 9)):
            m = self.message()
            if self.rnd.random() < 0.35:
                m = self.wrong_type(m)
            body = json.dumps(m).encode()
            out.append(self.mutate(body) if self.rnd.random() < 0.35 else frame(body))
        return out
