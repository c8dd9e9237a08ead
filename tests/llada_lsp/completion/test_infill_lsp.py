"""A chat checkpoint through the real language server over stdio and its in-process engine:
the `maxPromptTokens` option reaches the engine, the prompt is the checkpoint's chat template,
and completions come back without the format's artefacts."""

from __future__ import annotations

from pathlib import Path

import pytest

from llada_lsp.completion.postprocess import Spec, clean
from llada_lsp.options import OptionsError, parse_options
from tests.engine.model.adapters.tiny_ckpts import write_llada2_chat
from tests.llada_lsp.lsp_helpers import (
    debug_info,
    inline,
    item_texts,
    open_doc,
    position_of,
    server_session,
)

TEXT = "def area(w, h):\n    s = w * h\n    return \n\n\nprint(area(2, 3))\n"


@pytest.mark.asyncio(loop_scope="function")
async def test_a_chat_checkpoint_completes_through_the_language_server(tmp_path: Path) -> None:
    ckpt = write_llada2_chat(tmp_path / "llada2-chat")
    init = {"model": str(ckpt), "maxPromptTokens": 900, "speculative": False, "syntaxCheck": False,
            "rescueAlternatives": 0, "maxTokens": {"line": 6, "statements": 6, "block": 6}}
    async with server_session(init) as client:
        info = (await debug_info(client))["engineInfo"]
        assert info["prompt_format"] == "chat" and info["family"] == "llada2"
        assert info["max_prompt_tokens"] == 900  # the option, not the model's default (1536)
        uri = open_doc(client, tmp_path / "area.py", "python", text=TEXT)
        res = await inline(client, uri, position_of(TEXT, "    return "), invoked=True)
        for text in item_texts(res):
            assert "```" not in text and "role" not in text
        after = await debug_info(client)
        assert after["engineState"] == "ready" and after["engine"]["engine_calls"] >= 1


def test_prompt_options_parse_and_reject_bad_values() -> None:
    opts, warnings = parse_options({"maxPromptTokens": 2048, "promptTemplate": "/t/infill.jinja"})
    assert (opts.max_prompt_tokens, opts.prompt_template, warnings) == (2048, "/t/infill.jinja", [])
    assert parse_options({"llada": {"max_prompt_tokens": None}})[0].max_prompt_tokens is None
    for bad in ("4k", 0, True):
        with pytest.raises(OptionsError, match="maxPromptTokens"):
            parse_options({"maxPromptTokens": bad})


def test_a_suggestion_is_cut_before_it_repeats_the_code_below_the_cursor() -> None:
    spec = Spec(kind="block", left="    ", suffix="\n    return total\n")
    text, _ = clean("total = sum(xs)\n    total += 1\n    return total\n", spec)
    assert text == "total = sum(xs)\n    total += 1"
    short = Spec(kind="block", left="    ", suffix="\n)\n")  # too short to tell
    assert clean("a = 1\n)\nb = 2", short)[0].startswith("a = 1")
