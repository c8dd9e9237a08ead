"""Infill prompts for checkpoints without FIM tokens: the chat template with prefix and suffix
(engine.prompt.prompt_format), the answer's middle alone, and the prompt budget per model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.api import CompletionRequest, Plan
from engine.prompt.prompt_format import (
    FENCE,
    Parts,
    PromptFormat,
    clean_answer,
    language_of,
    turn_end,
)
from engine.service import EMBEDDED_MAX_PROMPT, REAL_MAX_PROMPT, TextEngine, default_prompt_budget
from tests.engine.model.adapters.tiny_ckpts import (
    EOS,
    ROLE_END,
    write_code_tokenizer,
    write_llada2,
    write_llada2_chat,
)

PREFIX = "import os\n\n\ndef area(w, h):\n    s = w * h\n    "
SUFFIX = "\n\n\nprint(area(2, 3))\n"
DOC = "file:///work/shapes.py"


@pytest.fixture(scope="module")
def chat_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_llada2_chat(tmp_path_factory.mktemp("ckpt") / "llada2-chat")


@pytest.fixture(scope="module")
def eng(chat_dir: Path) -> TextEngine:
    return TextEngine(chat_dir, threads=1)


def _contains(ids: list[int], part: list[int]) -> bool:
    return any(ids[i:i + len(part)] == part for i in range(len(ids) - len(part) + 1))


def test_the_prompt_holds_the_suffix_and_ends_where_the_answer_starts(eng: TextEngine) -> None:
    assert eng.format.kind == "chat" and eng.info()["prompt_format"] == "chat"
    ids, after, partial, _ = eng.layout(PREFIX, SUFFIX, heal=False, doc_key=DOC)
    assert after == [] and partial == ""
    enc = eng.tok.encode
    assert _contains(ids, enc(SUFFIX.strip("\n")).ids)  # the code after the cursor is read
    assert _contains(ids, enc("def area(w, h):\n    s = w * h\n").ids)  # the lines above
    # the assistant turn opens a code block with the cursor's line: the answer continues it
    opening = enc(f"<role>ASSISTANT</role>{FENCE}python\n    ").ids
    assert ids[-len(opening):] == opening
    text = eng.tok.decode(ids, skip_special_tokens=False)
    assert text.startswith("<role>SYSTEM</role>detailed thinking off<|role_end|><role>HUMAN</role>")
    # stable material first: the suffix before the lines above, the cursor's line last
    assert text.index("print(area(2, 3))") < text.index("def area") < text.rindex("<role>ASSISTANT</role>")


def test_typing_on_a_line_only_extends_the_prompt(eng: TextEngine) -> None:
    before, _, _, _ = eng.layout(PREFIX + "t = ", SUFFIX, heal=False, doc_key=DOC)
    after, _, _, _ = eng.layout(PREFIX + "t = s + 1", SUFFIX, heal=False, doc_key=DOC)
    assert after[: len(before)] == before
    # a new line moves the split: everything up to the old cursor line's start is kept
    newline, _, _, _ = eng.layout(PREFIX + "t = s\n    ", SUFFIX, heal=False, doc_key=DOC)
    kept = next(i for i, (a, b) in enumerate(zip(before, newline, strict=False)) if a != b)
    turn = eng.tok.encode(f"{FENCE}<|role_end|><role>ASSISTANT</role>{FENCE}python\n    t = ").ids
    assert kept >= len(before) - len(turn)


def test_typing_reuses_the_prompt_cache_of_a_chat_prompt(eng: TextEngine) -> None:
    plan = Plan(max_tokens=4)
    first = list(eng.complete(CompletionRequest("a", DOC, PREFIX + "s", SUFFIX, plan)))[-1]
    second = list(eng.complete(CompletionRequest("b", DOC, PREFIX + "s +", SUFFIX, plan)))[-1]
    assert first.stats and second.stats
    # the cache keeps whole blocks: at most the last block and the typed text are prefilled
    assert second.stats["prefill_tokens"] <= eng.config.block_size + 2
    assert second.stats["reused_tokens"] > 400


def test_healing_works_on_a_vocabulary_with_specials_at_the_end(eng: TextEngine) -> None:
    ids, _, partial, allowed = eng.layout(PREFIX + "ret", SUFFIX, doc_key=DOC)
    assert partial == "ret" and allowed is not None
    assert {eng.tok.id_to_token(i) for i in allowed.nonzero().flatten().tolist()} == {"ret", "return"}
    assert eng.tok.decode(ids).endswith(f"{FENCE}python\n    ")  # the fragment is backed off
    req = CompletionRequest("h", DOC, PREFIX + "ret", SUFFIX, Plan(max_tokens=6))
    done = list(eng.complete(req))[-1]
    assert not done.text.startswith("ret")  # the healed part is not repeated


def test_the_editor_gets_the_middle_alone(eng: TextEngine) -> None:
    """A chat answer as models write it: the cursor's line again, the middle, the closing
    fence, the end of turn and whatever follows; only the middle is offered."""
    plan = Plan(max_tokens=8, preset=eng.preset)  # decided, as the step loop sends it
    seq, partial, _ = eng.prepare(CompletionRequest("m", DOC, PREFIX + "return ", SUFFIX, plan), 0)
    raw = eng.tok.encode("return s * 2\n```\n").ids + [ROLE_END] + eng.tok.encode("junk").ids + [EOS]
    assert eng._answer(seq, raw, Plan(), partial) == "s * 2"
    assert eng._answer(seq, eng.tok.encode("s\n").ids + [EOS, 5, 6], Plan(), partial) == "s\n"
    assert eng.sp.end_of_middle == ROLE_END  # the decoder ends the middle at the end of turn


def test_clean_answer_takes_off_fences_and_the_echoed_line() -> None:
    assert clean_answer("```python\nx = 1\n```\ntext", "") == "x = 1"
    assert clean_answer("    return a + b\n```", "    return ") == "a + b"
    assert clean_answer("a + b", "    return ") == "a + b"
    assert clean_answer("ab", "x") == "ab"  # a short line is no evidence of an echo
    assert language_of("file:///a/b/c.rs") == "rust" and language_of("untitled:1") == ""


def test_a_prompt_template_file_replaces_the_format(chat_dir: Path, tmp_path: Path) -> None:
    tmpl = tmp_path / "infill.jinja"
    tmpl.write_text("<role>HUMAN</role>{{ suffix }}<|role_end|><role>ASSISTANT</role>{{ prefix }}")
    eng = TextEngine(chat_dir, threads=1, prompt_template=tmpl)
    assert eng.format.kind == "template" and eng.info()["prompt_template"] == str(tmpl)
    ids, _, _, _ = eng.layout("x = ", "\ny = 2\n", heal=False)
    assert eng.tok.decode(ids, skip_special_tokens=False) == \
        "<role>HUMAN</role>\ny = 2\n<|role_end|><role>ASSISTANT</role>x = "
    assert eng.sp.end_of_middle == ROLE_END  # the checkpoint's end of turn still ends the answer
    as_json = tmp_path / "infill.json"
    as_json.write_text(json.dumps({"prompt_template": "{{ prefix }}"}))
    assert TextEngine(chat_dir, threads=1, prompt_template=as_json).layout("x = ", "\n", heal=False)[0] == \
        eng.tok.encode("x = ").ids


def test_the_prompt_budget_follows_the_model_and_the_option(chat_dir: Path, tmp_path: Path) -> None:
    eng = TextEngine(chat_dir, threads=1)
    assert eng.max_len == 2048 and eng.max_prompt_tokens == default_prompt_budget("llada2", 2048) == 1536
    assert default_prompt_budget("llada2", 32768) == REAL_MAX_PROMPT
    assert default_prompt_budget("embedded", 2048) == EMBEDDED_MAX_PROMPT
    small = TextEngine(chat_dir, threads=1, max_prompt_tokens=600)
    assert small.max_prompt_tokens == small.info()["max_prompt_tokens"] == 600
    long_prefix = "".join(f"v{i} = {i}\n" for i in range(400))
    ids, _, _, _ = small.layout(long_prefix, SUFFIX * 40, heal=False)
    assert 500 < len(ids) <= 600
    plain = write_code_tokenizer(write_llada2(tmp_path / "base"))  # no chat template: the prefix alone
    base = TextEngine(plain, threads=1)
    assert base.format.kind == "plain" and base.max_prompt_tokens == default_prompt_budget("llada2", 512)


# The chat_template of GSAI-ML/LLaDA-8B-Instruct, verbatim from its tokenizer_config.json (as copied
# in yinj66/support_basis: LLaDA-8B-Instruct-B&S-light/tokenizer_config.json). It trims each
# message and appends the assistant header whatever `add_generation_prompt` says.
LLADA8B_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
    "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + "
    "'<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
    "{{ content }}{% endfor %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}"
)
LLADA8B_SPECIALS = {"bos_token": "<|startoftext|>", "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>"}
# Dream-v0-Instruct-7B renders a one-turn chat as Qwen2's ChatML with the default system message
# "You are a helpful assistant." (the prompts printed in DreamLM/Dream demo_completion.py and
# demo_multiturn_chat.py); this template reproduces that rendering.
DREAM_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{% endif %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def test_the_end_of_turn_of_the_published_templates() -> None:
    """LLaDA-8B-Instruct answers end `<|eot_id|>` then `<|endoftext|>` padding, Dream's
    `<|im_end|>`: found by rendering, also when the template ignores add_generation_prompt."""
    added = ["<|startoftext|>", "<|endoftext|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>",
             "<|im_start|>", "<|im_end|>"]
    assert turn_end(LLADA8B_TEMPLATE, LLADA8B_SPECIALS, added) == "<|eot_id|>"
    assert turn_end(DREAM_TEMPLATE, {"eos_token": "<|endoftext|>"}, added) == "<|im_end|>"
    parts = Parts("def f(x):\n", "    ret", "\nprint(f(2))\n", "python")
    llada = PromptFormat("chat", LLADA8B_TEMPLATE, special_texts=LLADA8B_SPECIALS).render(parts)
    assert llada.startswith("<|startoftext|><|start_header_id|>user<|end_header_id|>\n\nComplete the code")
    assert llada.endswith("```<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n```python\n    ret")
    assert llada.count("<|start_header_id|>assistant") == 1
    dream = PromptFormat("chat", DREAM_TEMPLATE).render(parts)
    assert dream.startswith("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n")
    assert dream.endswith("```<|im_end|>\n<|im_start|>assistant\n```python\n    ret")
