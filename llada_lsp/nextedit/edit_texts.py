"""The texts the next-edit worker holds, kept in step on both sides of its pipe (issue 49).

A request names its texts (the document now, its base) by id instead of shipping them whole:
the server's `Texts` (in `edit_process`) and the worker's (in `edit_worker`) apply one rule,
message by message, in the pipe's order, so each side knows what the other holds:
- per document the last `KEEP_TEXTS` texts named (the newest first), for the last `KEEP_DOCS`
  documents named (the least recently named go first); `drop(uri)` at the document's close;
- a text the worker holds is sent as `{"t": id}`; a new one as the changed middle of the held
  text nearest to it (`{"t", "from", "p", "s", "mid", "n"}`: the common prefix `p` and suffix
  `s` kept, `n` the result's length), or whole (`{"t", "full"}`) when none shares half of it.
The worker checks what it rebuilds (the base text named, the length); a text it does not hold
(`OutOfStep`: a worker restarted, a message lost) is answered `{"id", "resync"}` and the server
sends the request again with every text whole (`Texts.drop` first).
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from typing import Any

from llada_lsp.nextedit.edit_analysis import common_ends

KEEP_TEXTS = 3  # per document: the text analysed, its base, the text before (a base that settled)
KEEP_DOCS = 16  # documents whose texts are kept
DELTA_ENOUGH = 4096  # a middle this short is sent without looking for a nearer held text


class OutOfStep(Exception):
    """The worker lacks a text the server named: the request is sent again with its texts whole."""


class Texts:
    """The texts held, per document (both sides keep one; the server's also builds the refs)."""

    def __init__(self) -> None:
        self.docs: OrderedDict[str, list[tuple[int, str]]] = OrderedDict()
        self.ids = itertools.count(1)

    def _record(self, uri: str, tid: int, text: str) -> None:
        held = self.docs.pop(uri, None) or []
        held = [(tid, text)] + [e for e in held if e[0] != tid]
        self.docs[uri] = held[:KEEP_TEXTS]
        while len(self.docs) > KEEP_DOCS:
            self.docs.popitem(last=False)

    def drop(self, uri: str) -> None:
        self.docs.pop(uri, None)

    def ref(self, uri: str, text: str) -> dict[str, Any]:
        """The server's side: how to name `text` to the worker (and now it holds it)."""
        held = self.docs.get(uri, [])
        same = next((tid for tid, t in held if t is text), None)
        if same is None:
            same = next((tid for tid, t in held if len(t) == len(text) and t == text), None)
        if same is not None:
            self._record(uri, same, text)
            return {"t": same}
        tid, best, out = next(self.ids), 0, None
        for old_id, old in held:
            p, s = common_ends(old, text)
            if p + s > best and 2 * (p + s) >= len(text):
                best = p + s
                out = {"t": tid, "from": old_id, "p": p, "s": s, "mid": text[p:len(text) - s], "n": len(text)}
                if len(text) - best <= DELTA_ENOUGH:
                    break  # near enough: no other held text is compared (each comparison reads both)
        self._record(uri, tid, text)
        return out if out is not None else {"t": tid, "full": text}

    def resolve(self, uri: str, ref: dict[str, Any]) -> str:
        """The worker's side: the text `ref` names (now held); OutOfStep when it names one not held."""
        tid = int(ref["t"])
        if "full" in ref:
            text = str(ref["full"])
        else:
            held = dict(self.docs.get(uri, []))
            if "from" not in ref:
                if tid not in held:
                    raise OutOfStep(f"text {tid} of {uri} not held")
                text = held[tid]
            else:
                old = held.get(int(ref["from"]))
                if old is None:
                    raise OutOfStep(f"text {ref['from']} of {uri} not held")
                p, s = int(ref["p"]), int(ref["s"])
                text = old[:p] + str(ref["mid"]) + old[len(old) - s:]
                if p + s > len(old) or len(text) != int(ref["n"]):
                    raise OutOfStep(f"text {tid} of {uri}: {len(text)} characters rebuilt, {ref['n']} sent")
        self._record(uri, tid, text)
        return text
