"""The text engine on the real embedded model: events, stop rules, prompt cache, cancel, remask."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from engine.api import CompletionRequest, Plan
from engine.service import TextEngine, default_model_dir

SAMPLE = Path(__file__).resolve().parents[2] / "tests" / "fakes" / "samples" / "sample.py"


@pytest.fixture(scope="module")
def eng() -> TextEngine:
    if not (default_model_dir() / "config.json").exists():
        pytest.fail(f"the embedded model is missing at {default_model_dir()}")
    return TextEngine(threads=1)


def request(text: str, marker: str, plan: Plan, rid: str = "r1", key: str = "doc") -> CompletionRequest:
    at = text.index(marker) + len(marker)
    return CompletionRequest(rid, key, text[:at], text[at:], plan)


def test_events_stream_in_order(eng: TextEngine) -> None:
    text = SAMPLE.read_text()
    evs = list(eng.complete(request(text, "    for word in words:\n        ", Plan(max_tokens=32, stop="line"))))
    kinds = [e.kind for e in evs]
    assert kinds[-1] == "done" and kinds.count("done") == 1
    first = next(i for i, e in enumerate(evs) if e.draft_complete)
    assert all(e.kind == "draft" for e in evs[:first + 1])
    assert all(e.kind in ("edit", "done") for e in evs[first + 1:])
    # each event after the first complete draft is a change of the text
    assert all(a.text != b.text for a, b in zip(evs[first:-1], evs[first + 1:-1], strict=False))
    assert all("\n" not in e.text for e in evs)  # the single-line rule holds for every reported text
    st = evs[-1].stats or {}
    assert st["forwards"] >= 1 and st["tpf"] > 0 and st["total_ms"] >= st["first_draft_ms"] > 0


def test_typing_reuses_the_prompt_cache(eng: TextEngine) -> None:
    text = SAMPLE.read_text()
    eng.prompt_cache.clear()
    r1 = request(text, "def top_words(counts, n=10):\n    ", Plan(max_tokens=8), key="k")
    r2 = CompletionRequest("r2", "k", r1.prefix + "items = sor", r1.suffix, r1.plan)  # the user typed
    a = list(eng.complete(r1))[-1]
    b = list(eng.complete(r2))[-1]
    assert a.stats and b.stats
    assert a.stats["reused_tokens"] == 0
    assert b.stats["reused_tokens"] > 0.8 * (b.stats["reused_tokens"] + b.stats["prefill_tokens"])


def test_cancel_ends_with_reason_cancelled(eng: TextEngine) -> None:
    text = SAMPLE.read_text()
    flag = threading.Event()
    evs = []
    for e in eng.complete(request(text, "def main(argv):\n", Plan(max_tokens=64, preset="one_per_step")), flag):
        evs.append(e)
        flag.set()  # cancel after the first event: the next forward never runs
    assert evs[-1].kind == "done" and evs[-1].reason == "cancelled"
    assert evs[-1].step == evs[0].step


def test_remask_redecodes_a_span(eng: TextEngine) -> None:
    text = SAMPLE.read_text()
    req = request(text, "    if len(argv) < 2:\n        ", Plan(max_tokens=16, stop="line"), rid="rm")
    done = list(eng.complete(req))[-1]
    assert done.text
    other = CompletionRequest("other", "doc2", "x = ", "\n", Plan(max_tokens=4, stop="line"))
    list(eng.complete(other))  # another request in between: "rm" stays reachable
    evs = list(eng.remask("rm", [(0, len(done.text))]))
    assert evs[-1].kind == "done" and evs[-1].reason in ("end_of_middle", "stop_rule", "budget")
    assert list(eng.remask("nope", [(0, 1)]))[-1].kind == "error"


def test_token_healing_extends_a_partial_word(eng: TextEngine) -> None:
    ids, partial, allowed = eng.encode("    ret", "")
    assert partial == " ret" and allowed is not None
    assert all(eng.healing.texts[i].startswith(" ret") for i in allowed.nonzero().flatten().tolist())
    text = list(eng.complete(CompletionRequest("h", "h", "def f(x):\n    ret", "\n", Plan(max_tokens=8, stop="line"))))[-1].text
    assert not text.startswith("ret")  # the healed part is not repeated


def test_typing_deep_in_a_long_file_keeps_the_prompt_start(eng: TextEngine) -> None:
    """Past the prompt budget the prefix is cut from the left; the cut must not move with
    every keystroke, or the prompt cache misses everything after the suffix. The text is a
    held-out standard-library file (fixed for a Python version; a project file would move the
    cursor's spot whenever it is edited)."""
    import sysconfig

    from engine.prompt.prompt_cache import common_prefix

    text = (Path(sysconfig.get_paths()["stdlib"]) / "asyncio" / "proactor_events.py").read_text()
    at = len(text) * 2 // 3
    typed = "        result = [word.strip() for word in words if word]\n        return result\n"
    prev: list[int] | None = None
    shared = []
    for k in range(len(typed)):  # one keystroke at a time; the text after the cursor stays
        ids, _, _ = eng.encode(text[:at] + typed[:k], text[at:], heal=False)
        assert len(ids) <= eng.max_prompt_tokens
        if prev is not None:
            shared.append(common_prefix(prev, ids) / len(prev))
        prev = ids
    assert sum(s > 0.95 for s in shared) >= len(shared) - 2  # at most a window jump or two


def test_healing_finds_exactly_the_tokens_that_extend_a_partial_word(eng: TextEngine) -> None:
    texts = [eng.tok.decode([i]) for i in range(eng.tok.get_vocab_size())]
    n_special = 1 + max(v for v in eng.sp.__dict__.values() if v < len(texts))
    for partial in [" re", "ret", "self", " ", "zzzzq", "_", " sorted", "\n   "]:
        want = [i >= n_special and t.startswith(partial) for i, t in enumerate(texts)]
        longer = any(w and len(t) > len(partial) for w, t in zip(want, texts, strict=True))
        got = eng.healing.allowed(partial)
        if not longer:
            assert got is None, partial
        else:
            assert got is not None and got.tolist() == want, partial
    assert eng.healing.allowed(" re") is eng.healing.allowed(" re")  # cached
    for k in range(eng.healing.MAX_CACHED + 10):
        eng.healing.allowed(f"x{k}")
    assert len(eng.healing._cache) == eng.healing.MAX_CACHED  # bounded


def test_the_default_preset_is_decided_once_on_the_way_in(eng: TextEngine, monkeypatch: pytest.MonkeyPatch) -> None:
    """A plan that names no preset gets the engine's default once, when it enters the step loop
    (`engine.api.decided` in `Scheduler.submit`): `prepare` receives it decided, and refuses a
    plan that arrives undecided instead of deciding it again."""
    real = eng.prepare
    seen: list[str | None] = []

    def spy(req: CompletionRequest, row: int, policy: object = None) -> object:
        seen.append(req.plan.preset)
        return real(req, row, policy)  # type: ignore[arg-type]

    monkeypatch.setattr(eng, "preset", "one_per_step")  # not DEFAULT_PRESET: the engine's own default
    monkeypatch.setattr(eng, "prepare", spy)
    text = SAMPLE.read_text()
    evs = list(eng.complete(request(text, "    for word in words:\n        ", Plan(max_tokens=6, stop="line"))))
    assert evs[-1].kind == "done" and seen == ["one_per_step"]
    assert (evs[-1].stats or {})["tpf"] <= 1.0  # one_per_step's policy ran: a token a forward at most
    with pytest.raises(ValueError, match="names no preset"):
        real(request(text, "def main(argv):\n", Plan(max_tokens=4)), 0)


def test_the_kernels_are_set_up_when_the_model_loads_not_in_the_first_request() -> None:
    """The CPU confidence's choice of exponential (`kernels.eager.base`, timed once a process)
    is made while the engine loads: the first request's step finds it made."""
    from kernels import eager

    eager.base.cache_clear()
    fresh = TextEngine(threads=1)
    assert eager.base.cache_info().misses == 1  # timed at load
    text = SAMPLE.read_text()
    list(fresh.complete(request(text, "    for word in words:\n        ", Plan(max_tokens=8, stop="line"))))
    info = eager.base.cache_info()
    assert info.misses == 1 and info.hits >= 1  # the request's steps read the choice, timed nothing
