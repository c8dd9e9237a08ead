"""Text-level types of the engine: requests in, text events out.

The engine's core (`engine.decoding`) speaks token ids only; `engine.service.TextEngine`
tokenizes requests and turns token events into these text events. The language server,
the websocket daemon and the benches all speak these types (they are JSON-friendly).
"""

from __future__ import annotations

from dataclasses import KW_ONLY, asdict, dataclass, field, replace
from typing import Any, Literal

from engine.presets import PRESET_ALTERNATIVES

StopKind = Literal["none", "line", "dedent", "brace", "blank_line"]
EventKind = Literal["draft", "edit", "done", "error"]
DoneReason = Literal["end_of_middle", "stop_rule", "budget", "cancelled", "superseded", "deadline", "error"]


@dataclass(frozen=True)
class Plan:
    """What to generate: a token budget and a text-level stop rule.

    stop:
      "none"       - until end-of-middle or budget;
      "line"       - the middle is at most one line: cut before the first newline;
      "dedent"     - cut before the first non-blank line indented less than `indent`
                     (the block's body ended);
      "brace"      - cut after the brace that closes the scope opened before the cursor
                     (the line holding it is kept only if `keep_closer`), or when
                     brackets opened in the completion are closed and a dedent follows;
      "blank_line" - cut at the first blank line, or (with an `indent`) before the first
                     non-blank line indented less than `indent` (statements: their body ended).
    Indentation is compared in columns (a tab to the next multiple of 4); a dedent inside
    brackets the completion opened does not cut.
    max_lines: 0 for unlimited, else cut after this many lines.
    """

    max_tokens: int = 64
    stop: StopKind = "none"
    indent: str = ""
    max_lines: int = 0
    keep_closer: bool = False
    preset: str | None = None  # a preset of engine.presets.PRESET_NAMES; None = DEFAULT_PRESET
    first_token_prefix: str = ""  # token healing: the generated text must start with this
    # candidates decoded side by side from the most likely first tokens (engine.decoding.alternatives);
    # None: the preset's default (quality 4, others 1)
    alternatives: int | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Plan:
        known = set(cls.__dataclass_fields__)
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"unknown plan fields: {sorted(unknown)}")
        return cls(**d)


MAX_ALTERNATIVES = 8  # Plan.alternatives at most


def alternatives_for(plan: Plan, preset: str) -> int:
    """How many candidates `plan` asks for (1: the primary alone); `preset`: the default
    preset, for a plan without one. The one rule for it, on both sides."""
    n = plan.alternatives if plan.alternatives is not None else PRESET_ALTERNATIVES.get(plan.preset or preset, 1)
    return max(1, min(MAX_ALTERNATIVES, n))


def decided(plan: Plan, default: str) -> Plan:
    """`plan` with its preset (`default` when it names none) and its candidate count decided,
    once: the language server decides them per request (`llada_lsp.completion.plans.make_plan`), the step
    loop for a plan that comes without them (`Scheduler.submit`); from there they travel with
    the request and nothing derives them again."""
    preset = plan.preset or default
    return replace(plan, preset=preset, alternatives=alternatives_for(plan, preset))


@dataclass(frozen=True)
class ContextChunk:
    """Text from elsewhere in the workspace (another open file, a recent edit, a definition),
    placed in the prompt before the document's own prefix (`engine.prompt.prompt_format.render_context`)."""

    path: str  # workspace-relative path, shown to the model in the chunk's header
    text: str


NAMES_MAX = 256  # candidate names of one request at most
NAME_MAX_CHARS = 128


@dataclass(frozen=True)
class Names:
    """The known names that may complete the identifier the prefix ends with (the language
    server's scope analysis, `llada_lsp.context.names`): the engine decodes the first identifier among
    them (`engine.decoding.constraint`), by the model's probabilities. `keep_own_above`: the
    model's own, unlisted name is kept when its confidence reaches this (above 1: never)."""

    typed: str  # the identifier prefix at the cursor: the request's prefix ends with it
    names: tuple[str, ...]  # whole identifiers, each starting with `typed`
    keep_own_above: float = 0.9

    def to_json(self) -> dict[str, Any]:
        return {"typed": self.typed, "names": list(self.names), "keep_own_above": self.keep_own_above}

    @classmethod
    def from_json(cls, d: Any) -> Names:
        """Checked: raises ValueError saying what is wrong."""
        if not isinstance(d, dict) or set(d) - {"typed", "names", "keep_own_above"}:
            raise ValueError("names must be an object with the fields typed, names, keep_own_above")
        typed, names, keep = d.get("typed"), d.get("names"), d.get("keep_own_above", 0.9)
        if not isinstance(typed, str) or len(typed) > NAME_MAX_CHARS:
            raise ValueError(f"names.typed must be a string of at most {NAME_MAX_CHARS} characters")
        if not isinstance(names, list) or len(names) > NAMES_MAX or not all(
                isinstance(n, str) and n.startswith(typed) and 0 < len(n) <= NAME_MAX_CHARS for n in names):
            raise ValueError(f"names.names must be a list of at most {NAMES_MAX} strings that start with names.typed")
        if isinstance(keep, bool) or not isinstance(keep, (int, float)) or not 0.0 <= keep <= 2.0:
            raise ValueError("names.keep_own_above must be a number in [0, 2]")
        return cls(typed, tuple(names), float(keep))


@dataclass(frozen=True)
class CompletionRequest:
    request_id: str
    doc_key: str  # requests with the same key supersede each other; also keys the prompt cache
    prefix: str
    suffix: str
    plan: Plan = field(default_factory=Plan)
    context: tuple[ContextChunk, ...] = ()  # workspace context, most useful first
    names: Names | None = None  # known names for the identifier at the cursor (a constraint)


@dataclass(frozen=True)
class TextEdit:
    """Replace text[start:end] (character offsets into the old text: `diff_edits`)."""

    start: int
    end: int
    text: str


@dataclass(frozen=True)
class EngineEvent:
    kind: EventKind
    request_id: str
    text: str  # the whole middle as it stands now, already cut at the stop rule
    # (no edits against the previous event's text: the language server diffs the texts it
    # shows, `Reporter.refine`; the rest by keyword, so that no positional `edits` survives)
    _: KW_ONLY
    step: int = 0  # forwards so far
    draft_complete: bool = False  # every position of the span is committed: show it
    reason: DoneReason | None = None  # set on "done"
    error: str | None = None  # set on "error"
    stats: dict[str, Any] | None = None  # on "done": forwards, tokens, tpf, prefill_tokens,
    # reused_tokens, queue_ms, first_draft_ms, total_ms
    alternatives: tuple[str, ...] = ()  # on "done": the other candidates' texts, in rank order

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["alternatives"] = list(self.alternatives)
        return d


def diff_edits(old: str, new: str) -> tuple[TextEdit, ...]:
    """The smallest single edit that turns `old` into `new` (common prefix and suffix kept):
    the language server's `llada/refine` edits against the suggestion it showed."""
    if old == new:
        return ()
    n = min(len(old), len(new))
    i = 0
    while i < n and old[i] == new[i]:
        i += 1
    j = 0
    while j < n - i and old[len(old) - 1 - j] == new[len(new) - 1 - j]:
        j += 1
    return (TextEdit(i, len(old) - j, new[i: len(new) - j]),)


def apply_edits(text: str, edits: tuple[TextEdit, ...] | list[TextEdit]) -> str:
    """Apply edits given against the same base text (applied from the end)."""
    for e in sorted(edits, key=lambda e: e.start, reverse=True):
        text = text[: e.start] + e.text + text[e.end:]
    return text
