"""The first identifier decoded among known names (engine.decoding.constraint) on the embedded
tiny-code model: every policy writes a listed name and ends it there, the model keeps its own
name above the threshold, forks show other names, and the daemon's wire carries the field."""

from __future__ import annotations

import asyncio
import re
import sys
from pathlib import Path

import pytest

from engine.api import CompletionRequest, Names, Plan
from engine.daemon import protocol as P
from engine.service import TextEngine

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "daemon"))

PREFIX = '''from shop.pricing import apply_discount, apply_tax


def checkout(cart, code):
    subtotal = sum(item.price for item in cart)
    discounted = apply_disc'''
SUFFIX = "\n    return discounted\n"
IDENT = re.compile(r"[A-Za-z0-9_]*")


@pytest.fixture(scope="module")
def eng() -> TextEngine:
    return TextEngine(threads=1)


def request(names: Names | None, preset: str = "speedy", rid: str = "r", alternatives: int | None = None
            ) -> CompletionRequest:
    return CompletionRequest(rid, "shop/cart.py", PREFIX, SUFFIX,
                             Plan(max_tokens=16, stop="line", preset=preset, alternatives=alternatives), (), names)


def ident_of(text: str) -> str:
    """The identifier the completion writes at the cursor (the typed part included)."""
    return "apply_disc" + (IDENT.match(text) or re.match("", "")).group()  # type: ignore[union-attr]


def test_unconstrained_invents_a_name(eng: TextEngine) -> None:
    # the case the issue reports: the tiny model does not write the imported name on its own
    done = list(eng.complete(request(None)))[-1]
    assert ident_of(done.text) != "apply_discount", done.text


@pytest.mark.parametrize("preset", ["speedy", "quality", "low_confidence", "one_per_step", "threshold"])
def test_every_policy_writes_a_listed_name(eng: TextEngine, preset: str) -> None:
    names = Names("apply_disc", ("apply_discount",), keep_own_above=2.0)
    done = list(eng.complete(request(names, preset)))[-1]
    assert done.kind == "done"
    assert ident_of(done.text) == "apply_discount", done.text


def test_the_model_chooses_among_several_and_forks_show_the_others(eng: TextEngine) -> None:
    names = Names("apply_disc", ("apply_discount", "apply_discard", "apply_disco"), keep_own_above=2.0)
    done = list(eng.complete(request(names, "quality", alternatives=4)))[-1]
    got = [ident_of(t) for t in (done.text, *done.alternatives)]
    assert got[0] in names.names
    assert all(g in names.names for g in got), got
    assert len(set(got)) >= 2, got  # cycling shows other names


def test_the_model_keeps_its_own_name_above_the_threshold(eng: TextEngine) -> None:
    free = list(eng.complete(request(None, rid="a")))[-1].text
    names = Names("apply_disc", ("apply_discount",), keep_own_above=0.0)  # any confidence suffices
    kept = list(eng.complete(request(names, rid="b")))[-1].text
    assert kept == free


def test_names_round_trip_on_the_wire_and_bad_ones_are_clear_errors() -> None:
    req = request(Names("apply_disc", ("apply_discount", "apply_discard"), 0.75))
    msg = P.parse(P.dumps(P.complete_message(req)))
    assert isinstance(msg, P.Complete) and msg.request == req
    assert "names" not in P.complete_message(request(None))
    for bad, needle in ((["x"], "must be an object"), ({"typed": "ab", "names": ["xy"]}, "start with names.typed"),
                        ({"typed": "a", "names": ["ab"], "keep_own_above": "hi"}, "keep_own_above")):
        frame = P.complete_message(request(None))
        frame["names"] = bad
        with pytest.raises(P.ProtocolError) as e:
            P.parse(P.dumps(frame))
        assert e.value.code == P.BAD_MESSAGE and needle in str(e.value)


def test_over_the_daemon_the_same_name_as_in_process(eng: TextEngine) -> None:
    from llada_lsp.engines.ws_engine import WsConnection
    from tests.engine.daemon.daemon_helpers import serve_in_thread, stop_served

    names = Names("apply_disc", ("apply_discount",), keep_own_above=2.0)
    local = list(eng.complete(request(names, rid="l")))[-1].text
    served = serve_in_thread(eng, host="127.0.0.1", port=0, token="t0k")

    async def remote() -> str:
        conn = await WsConnection.open(served.url, "t0k")
        evs = [ev async for ev in conn.complete(request(names, rid="w"))]
        await conn.close()
        return evs[-1].text

    try:
        text = asyncio.run(remote())
    finally:
        stop_served(served)
    assert ident_of(text) == "apply_discount"
    assert text == local


def test_the_trie_is_walked_one_committed_token_at_a_time() -> None:
    """Token ids only: two names share their first token; the logits are wider than the mask
    (padded vocabulary rows count as extending a name)."""
    import torch

    from engine.decoding.constraint import NameConstraint

    ident = torch.zeros(10, dtype=torch.bool)
    ident[[5, 6, 7, 8]] = True  # 5..8 extend an identifier; 1..4 end one; 0 is [MASK]
    c = NameConstraint([(5, 6), (5, 7, 8)], ["ab", "acd"], ident, mask_id=0, keep_own_above=2.0)
    width, rows = 12, 6
    middle, committed = [0] * rows, [False] * rows
    lg = c.apply(torch.randn(rows, width), middle, committed)
    assert torch.isfinite(lg[0]).nonzero().flatten().tolist() == [5]  # the shared first token
    for j in (1, 2, 3):  # held masked while the name is open, as far as the longest path reaches
        assert torch.isfinite(lg[j]).nonzero().flatten().tolist() == [0]
    assert torch.isfinite(lg[4]).all()
    middle[0], committed[0] = 5, True
    lg = c.apply(torch.randn(rows, width), middle, committed)
    assert torch.isfinite(lg[0]).nonzero().flatten().tolist() == [5]  # kept: no edit changes it
    assert sorted(torch.isfinite(lg[1]).nonzero().flatten().tolist()) == [6, 7]  # the model chooses
    middle[1], committed[1] = 7, True  # one path left: forced at once, and its end
    lg = c.apply(torch.randn(rows, width), middle, committed)
    assert torch.isfinite(lg[2]).nonzero().flatten().tolist() == [8]
    assert not torch.isfinite(lg[3, [5, 6, 7, 8, 10, 11]]).any() and torch.isfinite(lg[3, [1, 2, 3, 4]]).all()
    assert c.first_scores is not None and torch.isfinite(c.first_scores).nonzero().flatten().tolist() == [5]
