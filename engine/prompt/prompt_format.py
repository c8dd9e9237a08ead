"""Prompt formats: how one request's prefix and suffix become a checkpoint's prompt (docs/models.md).

- `fim`: the checkpoint has fill-in-the-middle tokens (the embedded model): the suffix-first
  layout `<fim_suffix> suffix <fim_prefix> prefix <fim_middle>`, built from ids by engine.service.
- `chat`: no FIM tokens but a chat template (`chat_template` of tokenizer_config.json, as on every
  LLaDA2.x, LLaDA-8B-Instruct and Dream-Instruct checkpoint). The template is rendered offline by
  transformers' `apply_chat_template` with one user turn holding an instruction, the code after
  the cursor and the code before the cursor's line; the assistant turn then opens a code block
  with the cursor's line up to the cursor, so the answer continues the code right at the cursor.
  Stable material comes first (instruction, suffix, the lines above), the text that typing
  changes last: the prompt cache (and a radix cache) reuses all but the cursor's line.
- `template`: a user's Jinja file (`--prompt-template`, LSP `promptTemplate`), rendered with the
  request's parts; the answer starts right after its output.
- `plain`: neither (a base checkpoint): the prefix alone, and for a bidirectional model the
  suffix after the masked middle.

Also here: what is left of an answer once the format's artefacts (code fences, an echo of the
cursor's line, the end-of-turn token) are taken off. Pure string work; transformers is imported
only when a chat or template format is built.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.api import ContextChunk

FENCE = "```"
INSTRUCTION = (
    "Complete the code at the cursor. You are given the code after the cursor and the code before "
    "the cursor's line. Reply with one code block that starts with the cursor's line as written so "
    "far and continues it with the missing code only, stopping where the code after the cursor begins."
)
# fence names by file extension (the request's doc_key is its document's URI or path)
LANGUAGES = {
    ".py": "python", ".pyi": "python", ".js": "javascript", ".jsx": "javascript", ".mjs": "javascript",
    ".ts": "typescript", ".tsx": "tsx", ".go": "go", ".rs": "rust", ".java": "java", ".c": "c",
    ".h": "c", ".cc": "cpp", ".cpp": "cpp", ".hpp": "cpp", ".cxx": "cpp", ".lua": "lua", ".rb": "ruby",
    ".sh": "bash", ".kt": "kotlin", ".swift": "swift", ".cs": "csharp", ".php": "php", ".scala": "scala",
}
LINE_COMMENTS = {"python": "#", "ruby": "#", "bash": "#", "lua": "--"}  # else "//" (C-like languages)
_OPEN_FENCE = re.compile(r"^[ \t]*```[\w+#.-]*[ \t]*\n")
_CLOSE_FENCE = re.compile(r"(?:^|\n)[ \t]*```")


@dataclass(frozen=True)
class Parts:
    """One request's text, already trimmed to the budget: `head` + `tail` is the prefix, `tail`
    its last line up to the cursor (less a healed partial token)."""

    head: str
    tail: str
    suffix: str
    language: str = ""
    context: str = ""  # workspace context, rendered (render_context)

    def variables(self) -> dict[str, Any]:
        return {"prefix": self.head + self.tail, "suffix": self.suffix, "head": self.head, "tail": self.tail,
                "language": self.language, "instruction": INSTRUCTION, "context": self.context}


def split_tail(prefix: str) -> tuple[str, str]:
    """(head, tail): the tail is the prefix's last line, from its start to the cursor."""
    cut = prefix.rfind("\n") + 1
    return prefix[:cut], prefix[cut:]


def language_of(doc_key: str) -> str:
    """The code-fence language name of a document from its path's extension ("" if unknown)."""
    name = doc_key.rsplit("/", 1)[-1]
    dot = name.rfind(".")
    return LANGUAGES.get(name[dot:].lower(), "") if dot > 0 else ""


def comment_of(language: str) -> str:
    """The line-comment marker of a fence language ("#" when unknown)."""
    return LINE_COMMENTS.get(language, "//" if language else "#")


def render_context(chunks: Sequence[ContextChunk], language: str) -> str:
    """Workspace context as the model sees it, before the document's own prefix: each chunk
    under a comment naming its file, a blank line after it. Training data is laid out with this
    same function (engine.train), so the model learns where context sits."""
    mark = comment_of(language)
    return "".join(f"{mark} file: {c.path}\n{c.text.rstrip()}\n\n" for c in chunks if c.text.strip())


def user_message(parts: Parts) -> str:
    """The user turn: the instruction, workspace context, the code after the cursor, then the
    code above the cursor's line (typing on that line leaves all of it unchanged)."""
    lang = parts.language
    suffix = parts.suffix if parts.suffix.endswith("\n") or not parts.suffix else parts.suffix + "\n"
    head = parts.head if parts.head.endswith("\n") or not parts.head else parts.head + "\n"
    context = (f"Code from other files of the workspace:\n{FENCE}{lang}\n{parts.context}{FENCE}\n\n"
               if parts.context else "")
    return (f"{INSTRUCTION}\n\n{context}The code after the cursor:\n{FENCE}{lang}\n{suffix}{FENCE}\n\n"
            f"The code before the cursor's line:\n{FENCE}{lang}\n{head}{FENCE}")


def answer_opening(parts: Parts) -> str:
    """How the assistant turn starts: a code block holding the cursor's line so far."""
    return f"{FENCE}{parts.language}\n{parts.tail}"


@dataclass
class PromptFormat:
    """How prompts are built for one checkpoint. `kind` is fim, chat, template or plain;
    `end_texts` are the special tokens that end an answer besides end-of-text (a chat
    template's end of turn)."""

    kind: str
    template: str = ""
    source: str = ""  # where the template came from (for info and docs)
    end_texts: tuple[str, ...] = ()
    special_texts: dict[str, str] = field(default_factory=dict)  # bos_token, eos_token, ... for the template
    reason: str = ""  # why the checkpoint's files chose this format (`llada-engine check` prints it)
    _renderer: Any = None

    @property
    def wraps_answer(self) -> bool:
        """Whether the answer may carry the format's artefacts (fences, an echoed line)."""
        return self.kind == "chat"

    def render(self, parts: Parts) -> str:
        """The prompt text of a chat or template format (special tokens as their texts)."""
        if self.kind == "chat":
            return self._apply([{"role": "user", "content": user_message(parts)}], True, {}) + answer_opening(parts)
        if self.kind == "template":
            msgs = [{"role": "user", "content": user_message(parts)}]
            return self._apply(msgs, False, parts.variables())
        raise ValueError(f"a {self.kind} prompt is built from ids, not rendered")

    def _apply(self, messages: list[dict[str, str]], generation_prompt: bool, extra: dict[str, Any]) -> str:
        if self._renderer is None:
            from tokenizers import Tokenizer
            from transformers import (
                PreTrainedTokenizerFast,  # lazy: only chat/template formats need it
            )
            self._renderer = PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(_EMPTY_BPE),
                                                     **self.special_texts)
        out = self._renderer.apply_chat_template(messages, chat_template=self.template, tokenize=False,
                                                 add_generation_prompt=generation_prompt, **extra)
        return str(out)


# an empty tokenizer for transformers' renderer: the engine tokenizes with its own
_EMPTY_BPE = json.dumps({"version": "1.0", "model": {"type": "BPE", "vocab": {}, "merges": []}})


def turn_end(template: str, special_texts: dict[str, str], added: list[str]) -> str | None:
    """The added token that closes an assistant turn in `template` (e.g. `<|role_end|>`), found
    by rendering a one-turn conversation with a sentinel answer; None if none follows it. Only
    what directly follows the answer counts: LLaDA-8B-Instruct's template appends the assistant
    header even without a generation prompt (`<|eot_id|>` still comes first), and Dream's
    (ChatML) injects a default system turn before the user's (docs/models.md)."""
    sentinel = "\u2063ANSWER\u2063"
    fmt = PromptFormat("chat", template, special_texts=special_texts)
    msgs = [{"role": "user", "content": "q"}, {"role": "assistant", "content": sentinel}]
    text = fmt._apply(msgs, False, {})
    after = text.split(sentinel, 1)[1].lstrip(" \n") if sentinel in text else ""
    return next((t for t in sorted(added, key=len, reverse=True) if t and after.startswith(t)), None)


def read_template_file(path: str | Path) -> str:
    """A --prompt-template file: a Jinja template, or a tokenizer_config.json-style JSON
    object whose `prompt_template` (or `chat_template`) key holds one."""
    text = Path(path).read_text(encoding="utf-8")
    if Path(path).suffix == ".json":
        data = json.loads(text)
        return str(data.get("prompt_template") or data["chat_template"])
    return text


def clean_answer(text: str, tail: str) -> str:
    """The middle alone from a chat answer: without a code fence opened again, everything
    from the closing fence on, and the cursor's line when the model wrote it again."""
    m = _OPEN_FENCE.match(text)
    if m is not None:
        text = text[m.end():]
    m = _CLOSE_FENCE.search(text)
    if m is not None:
        text = text[: m.start()]
    echo = tail.lstrip(" \t")
    if len(echo.strip()) >= 3 and text.lstrip(" \t").startswith(echo):
        text = text.lstrip(" \t")[len(echo):]
    return text
