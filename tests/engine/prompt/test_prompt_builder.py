"""The torch-free prompt builder (engine.prompt.builder): the same prompt as the engine's for the
same request, workspace context placed once within its share of the budget (the engine alone
budgets it), and no torch."""

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
from tests.engine.model.adapters.tiny_ckpts import write_llada2_chat

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
    assert lay.ids[start:start + len(ctx)] == ctx and lay.context == CHUNKS
    assert len(lay.ids) <= engine.max_prompt_tokens
    assert len(b.encode(render_context(CHUNKS, "python"))) <= b.max_context_tokens


def test_context_is_placed_once_in_rank_order_within_the_share(engine: TextEngine) -> None:
    """A chunk over what is left gives its head (at least two leading lines); one whose head
    does not fit either is left out, and a later, smaller chunk still gets the room."""
    b = engine.prompts
    share = b.max_context_tokens
    assert share == int((engine.max_prompt_tokens - 3) * CONTEXT_SHARE) and engine.info()["max_context_tokens"] == share

    def cost(chunks: tuple[ContextChunk, ...]) -> int:
        return len(b.encode(render_context(chunks, "python")))

    big = ContextChunk("big.py", "def big(x):\n" + "    x = x + 1\n" * 400 + "    return x")
    lay = b.layout(PREFIX, SUFFIX, heal=False, doc_key=DOC, context=(CHUNKS[0], big, CHUNKS[1]))
    head = lay.context[1]
    assert lay.context[0] == CHUNKS[0] and head.path == "big.py" and big.text.startswith(head.text)
    assert head.text.startswith("def big(x):\n    x = x + 1") and cost(lay.context) <= share
    longer = ContextChunk("big.py", big.text[:len(head.text) + len("\n    x = x + 1")])
    assert cost((CHUNKS[0], longer)) > share - 1  # the longest head (a token kept free at the seam)
    one_line = ContextChunk("wide.py", "TABLE = [" + ", ".join(str(i) for i in range(600)) + "]")
    lay = b.layout(PREFIX, SUFFIX, heal=False, doc_key=DOC, context=(CHUNKS[0], one_line, CHUNKS[1]))
    assert lay.context == CHUNKS  # the one-line table has no head; the chunk after it is placed
    sp = engine.sp
    start = lay.ids.index(sp.fim_prefix) + 1
    ctx = b.encode(render_context(CHUNKS, "python"))
    assert lay.ids[start:start + len(ctx)] == ctx


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
