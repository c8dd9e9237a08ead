"""Prompt cache across requests: shared prefixes are reused, results are unchanged."""

from __future__ import annotations

from engine.decoding.decode import Sequence
from engine.decoding.policies import make_policy
from engine.model.native import Transformer
from engine.prompt.prompt_cache import PromptCache, common_prefix
from tests.engine.conftest import decode_alone, prompt_of


def decode(model: Transformer, prompt: list[int], cache: PromptCache | None, key: str) -> tuple[list[int], int]:
    cfg = model.config
    reused = cache.restore(model, 0, key, prompt) if cache else 0
    seq = Sequence(prompt, cfg.special, make_policy("threshold", threshold=0.4), cfg.block_size, 8,
                   cfg.shift_logits, reused=reused, max_len=512)
    store = (lambda s: cache.store(model, 0, key, prompt)) if cache else None
    decode_alone(model, seq, on_prefilled=store)
    return seq.final_middle(), seq.reused


def test_typing_extends_the_prompt_and_reuses_its_cache(tiny: Transformer) -> None:
    cache = PromptCache(max_entries=2)
    suffix = [40, 41, 42]
    p1 = prompt_of(tiny.config, list(range(10, 30)), suffix)
    p2 = prompt_of(tiny.config, list(range(10, 33)), suffix)  # the user typed three more tokens
    _, reused1 = decode(tiny, p1, cache, "doc")
    assert reused1 == 0
    out2, reused2 = decode(tiny, p2, cache, "doc")
    assert reused2 == common_prefix(p1, p2) == len(p1) - 1  # all but the old <fim_middle>
    fresh, _ = decode(tiny, p2, None, "doc")
    assert out2 == fresh  # reused KV gives the same tokens as a fresh prefill


def test_full_hit_refeeds_only_the_last_prompt_token(tiny: Transformer) -> None:
    cache = PromptCache()
    p = prompt_of(tiny.config, list(range(10, 25)), [])
    a, _ = decode(tiny, p, cache, "x")
    b, reused = decode(tiny, p, cache, "y")
    assert reused == len(p) - 1 and a == b


def test_lru_is_bounded(tiny: Transformer) -> None:
    cache = PromptCache(max_entries=2)
    for i in range(4):
        decode(tiny, prompt_of(tiny.config, [10 + i] * 5, []), cache, f"d{i}")
    assert len(cache.entries) == 2 and "d3" in cache.entries
    assert "d1" not in cache.entries  # least recently used (d0 was touched by every lookup)
