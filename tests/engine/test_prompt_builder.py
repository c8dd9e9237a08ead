"""The torch-free prompt builder (engine.prompt.builder): the same prompt as the engine's for the
same request, workspace context in whole chunks within its share of the budget, and no torch."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from engine.api import ContextChunk, Plan
from engine.model.checkpoint import EMBEDDED_DIR
from engine.prompt.builder import CONTEXT_SHARE, PromptBuilder
from engine.prompt.prompt_format import render_context
from engine.service import TextEngine
from tests.adapters.tiny_ckpts import write_llada2_chat

PREFIX = "import os\n\n\ndef area(w, h):\n    s = w * h\n    ret"
SUFFIX = "\n\n\nprint(area(2, 3))\n"
DOC = "file:///work/shapes.py"
CHUNKS = (ContextChunk("geo/units.py", "def to_metres(x):\n    return x * 0.3048\n"),
          ContextChunk("geo/shapes.py", "class Square:\n    side: float\n"))


@pytest.fixture(scope="module")
def engine() -> TextEngine:
    return TextEngine(threads=1)


def _contains(ids: list[int], part: list[int]) -> bool:
    return any(ids[i:i + len(part)] == part for i in range(len(ids) - len(part) + 1))


def test_builder_from_tokenizer_files_matches_the_engine(engine: TextEngine) -> None:
    built = PromptBuilder.from_dir(EMBEDDED_DIR, engine.max_prompt_tokens)
    for context in ((), CHUNKS):
        ours = built.layout(PREFIX, SUFFIX, heal=False, doc_key=DOC, context=context)
        ids, suffix, partial, _ = engine.layout(PREFIX, SUFFIX, heal=False, doc_key=DOC, context=context)
        assert (ours.ids, ours.suffix, ours.partial) == (ids, suffix, partial)
    assert built.end_ids == engine.end_ids


def test_context_sits_before_the_prefix_in_whole_chunks(engine: TextEngine) -> None:
    b = engine.prompts
    lay = b.layout(PREFIX, SUFFIX, heal=False, doc_key=DOC, context=CHUNKS)
    sp = engine.sp
    start = lay.ids.index(sp.fim_prefix) + 1
    ctx = b.encode(render_context(CHUNKS, "python"))
    assert lay.ids[start:start + len(ctx)] == ctx and lay.context_chunks == 2
    assert len(lay.ids) <= engine.max_prompt_tokens
    # a chunk too big for the context's share is left out whole; the ones before it stay
    big = ContextChunk("big.py", "x = 1\n" * 400)
    lay2 = b.layout(PREFIX, SUFFIX, heal=False, doc_key=DOC, context=(CHUNKS[0], big, CHUNKS[1]))
    assert lay2.context_chunks == 1
    one = b.encode(render_context(CHUNKS[:1], "python"))
    assert lay2.ids[start:start + len(one)] == one and b.encode("x = 1\n" * 3)[0] not in lay2.ids[:start]
    assert len(b.encode(render_context(CHUNKS, "python"))) <= int(engine.max_prompt_tokens * CONTEXT_SHARE)


def test_context_keeps_the_prompt_start_while_typing(engine: TextEngine) -> None:
    """Typing changes only the prompt's tail: the context and the file's start stay put."""
    b = engine.prompts
    long_prefix = "".join(f"def f{i}(a, b):\n    return a + b * {i}\n\n" for i in range(60))
    prev: list[int] | None = None
    for typed in ("", "r", "re", "ret", "retu"):
        ids = b.layout(long_prefix + typed, SUFFIX, heal=False, doc_key=DOC, context=CHUNKS).ids
        if prev is not None:
            shared = next((i for i, (x, y) in enumerate(zip(prev, ids, strict=False)) if x != y), len(prev))
            assert shared >= len(prev) - 4
        prev = ids


def test_chat_context_is_stable_material_before_the_code(tmp_path: Path) -> None:
    path = write_llada2_chat(tmp_path / "llada2-chat")
    b = PromptBuilder.from_dir(path, 1024)
    assert b.format.kind == "chat"
    text = b.tok.decode(b.layout(PREFIX, SUFFIX, doc_key=DOC, context=CHUNKS).ids, skip_special_tokens=False)
    assert "Code from other files" in text and "# file: geo/units.py" in text
    assert text.index("# file: geo/units.py") < text.index("The code after the cursor") < text.index("def area")
    # the answer is cut at the chat format's end of turn and cleaned of its fence
    toks = b.encode("```python\n    s = w * h\n```") + sorted(b.end_ids - {b.sp.end_of_text})[:1]
    assert b.answer(toks, Plan(), "", "    s = ") == "w * h"


def test_the_builder_imports_no_torch() -> None:
    code = ("import sys; import engine.prompt.builder, engine.api; "
            "assert 'torch' not in sys.modules, 'torch imported'; print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
