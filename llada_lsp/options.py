"""Server options: typed dataclasses filled from `initializationOptions` and
`workspace/configuration` (section "llada"), with documented defaults (docs/lsp.md).

Keys may be camelCase (as editors send them) or snake_case. Unknown keys are ignored with a
warning; values of the wrong type raise `OptionsError` naming the key.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any

from engine.api import MAX_ALTERNATIVES
from engine.presets import DEFAULT_PRESET, MODES

Mode = str  # a preset of engine.presets.MODES (the names' one list; checked when options are read)
MAX_CONTEXT_TOKENS = 65536


class OptionsError(ValueError):
    """An option has a value of the wrong type or outside its range."""


# Options that move the user's text or token elsewhere, or load and run programs: honoured from
# `initializationOptions` only (the editor's own, user-level configuration), never from
# `workspace/configuration` or `workspace/didChangeConfiguration`, which a workspace can set.
# (`prompt_template` names a template file that is rendered: a workspace's could run code.)
MACHINE_SCOPED: frozenset[str] = frozenset({"engine", "engine_token", "model", "device", "prompt_template",
                                            "sglang", "dtype", "prompt_format", "threads"})


@dataclass
class MaxTokens:
    """Token budget per span kind."""

    line: int = 48
    statements: int = 96
    block: int = 160


@dataclass
class ContextOptions:
    """Characters of prefix and suffix sent to the engine (trimmed by syntactic units)."""

    prefix_chars: int = 3000
    suffix_chars: int = 1000
    imports_chars: int = 600  # of prefix_chars, at most this much for kept imports/headers


@dataclass
class SglangOptions:
    """The SGLang servers of `engine = "sglang"` (docs/scale-out.md): `urls` maps a preset
    (speedy, quality) to its servers (a URL or a list, load-balanced); `router` is an
    sglang-router serving the presets `urls` does not list (aborts go to its workers)."""

    urls: dict[str, list[str]] = field(default_factory=dict)
    router: str | None = None


@dataclass
class NextEditOptions:
    """`llada/nextEdit` (docs/lsp.md "Next-edit suggestions"): whether it is on, the model
    fills' token budget and confidence threshold. The debounce is the client's."""

    enabled: bool | None = None  # None: on only for a model that passed the precision gate (next_edit.GATED)
    site_tokens: int = 12  # a model-filled site's token budget (an added argument)
    threshold: float | None = None  # fill threshold in (0, 1]; None: the model's gated one
    placeholders: bool = True  # an added argument or field no fill reaches: its name, to type over


@dataclass
class WorkspaceIndexOptions:
    """The index of definitions in the workspace folders (llada_lsp.context.workspace_index)."""

    max_files: int = 2000  # files indexed per language family
    max_bytes: int = 16 * 1024 * 1024  # bytes of the files indexed, in all


# The documented range of every numeric option (docs/lsp.md "Options"): a value outside it is
# clamped to it, with a warning. editors/vscode/package.json gives its settings the same
# minimum and maximum (tests/llada_lsp/context/test_hardening_workspace.py checks that they agree).
RANGES: dict[str, tuple[int, int]] = {
    "maxTokens.line": (1, 1024),
    "maxTokens.statements": (1, 2048),
    "maxTokens.block": (1, 4096),
    "context.prefixChars": (0, 1_000_000),
    "context.suffixChars": (0, 1_000_000),
    "context.importsChars": (0, 100_000),
    "nextEdit.siteTokens": (1, 64),
    "maxPromptTokens": (1, 1 << 20),
    "threads": (0, 1024),
    "debounceMs": (0, 2000),
    "maxFileBytes": (1024, 64 * 1024 * 1024),
    "cacheSize": (0, 4096),
    "syntaxRemaskPasses": (0, 8),
    "maxLines": (0, 10_000),
    "alternatives": (0, MAX_ALTERNATIVES),
    "invokedAlternatives": (0, MAX_ALTERNATIVES),
    "rescueAlternatives": (0, MAX_ALTERNATIVES),
    "engineFirstEventMs": (0, 120_000),  # 0 = none: from the user's settings only
    "engineTimeoutMs": (0, 600_000),  # 0 = none: from the user's settings only
    "contextTokens": (0, MAX_CONTEXT_TOKENS),
    "workspaceIndex.maxFiles": (0, 100_000),
    "workspaceIndex.maxBytes": (0, 256 * 1024 * 1024),
}
# Deadlines a workspace may not turn off (0 = no deadline): a request could then wait forever.
NO_ZERO_FROM_WORKSPACE: frozenset[str] = frozenset({"engine_first_event_ms", "engine_timeout_ms"})
NESTED_SECTION = "llada"  # a section inside the section: refused from the workspace


@dataclass
class Options:
    mode: Mode = DEFAULT_PRESET  # the preset each request names (llada_lsp.completion.plans.make_plan)
    max_tokens: MaxTokens = field(default_factory=MaxTokens)
    context: ContextOptions = field(default_factory=ContextOptions)
    next_edit: NextEditOptions = field(default_factory=NextEditOptions)
    # "inprocess" | "auto" (the user's daemon, started when none runs) | "ws://host:port"
    # | "sglang" (SGLang servers, the `sglang` option; `model` names their tokenizer)
    engine: str = "inprocess"
    sglang: SglangOptions = field(default_factory=SglangOptions)
    engine_token: str | None = None  # for a ws:// daemon; None = $LLADA_ENGINE_TOKEN / runtime file
    model: str | None = None  # model directory; None = $LLADA_MODEL or the embedded model
    device: str = "cpu"  # "cpu" | "cuda" | "auto"
    max_prompt_tokens: int | None = None  # prompt budget of the in-process engine; None = the model's
    prompt_template: str | None = None  # a Jinja prompt template file (docs/models.md); None = the model's
    dtype: str = "auto"  # in-process engine: auto (the checkpoint's own) | bfloat16 | float32 | float16
    prompt_format: str = "auto"  # auto (the checkpoint's files decide) | chat | plain (base vs instruct)
    # torch CPU threads of the in-process engine, or of a daemon "auto" starts; 0 = sized for the
    # machine (measured) and re-checked while it runs (engine.model.threads)
    threads: int = 0
    languages: list[str] = field(default_factory=lambda: ["*"])  # languageIds, "*" = all
    debounce_ms: int = 0
    max_file_bytes: int = 1_000_000  # larger documents get no completions (and no tree)
    cache_size: int = 256
    syntax_check: bool = True
    speculative: bool = True  # after an accept, request the next completion ahead of time
    syntax_remask_passes: int = 2  # re-mask the tokens of a parse error this often, then trim
    max_lines: int = 0  # 0 = the plan's own limit
    # candidates decoded side by side from the most likely first tokens, the first that adds
    # no parse error shown (engine.decoding.alternatives); 0 = the mode's default (quality 4, speedy 1)
    alternatives: int = 0
    # an explicitly invoked inline completion (LSP triggerKind Invoked: the user asked, e.g.
    # to cycle) waits for at least this many candidates and answers every one that fits
    invoked_alternatives: int = 4
    # an answer that comes out empty from fewer candidates is decoded again with this many,
    # and the first that fits is shown (0 or 1: off)
    rescue_alternatives: int = 4
    # deadlines of every engine request: its first event, and its end (ms; 0 = none)
    engine_first_event_ms: int = 10000
    engine_timeout_ms: int = 30000
    # workspace context (llada_lsp.context.workspace): definitions of the names near the cursor found in
    # other files, and blocks of other open documents, in the prompt before the prefix
    workspace_context: bool = True
    # its budget in estimated tokens, capped by the engine's share (40%) of its prompt budget
    context_tokens: int = 1024
    workspace_index: WorkspaceIndexOptions = field(default_factory=WorkspaceIndexOptions)
    # gitignore patterns of files that never reach a prompt and are not completed, added to
    # llada_lsp.context.exclusions.DEFAULT_EXCLUDES (a workspace may add to the user's, never remove)
    exclude: list[str] = field(default_factory=list)
    # the identifier at the cursor, in a use position, is decoded among the names in scope
    # (llada_lsp.context.names, engine.decoding.constraint); the model keeps its own unlisted name
    # only when its confidence reaches names_keep_own_above (above 1: never)
    names_constraint: bool = True
    names_keep_own_above: float = 0.9

    def language_enabled(self, language_id: str) -> bool:
        return "*" in self.languages or language_id in self.languages

    def to_json(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        if d.get("engine_token"):
            d["engine_token"] = "***"  # debugInfo never shows the secret
        return d


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def _check(value: Any, expected: Any, key: str) -> Any:
    ok: bool
    if expected is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
        if ok and value < 0:
            raise OptionsError(f"option {key!r} must be >= 0, got {value}")
    elif expected is bool:
        ok = isinstance(value, bool)
    elif expected is str:
        ok = isinstance(value, str)
    elif expected == "bool|None":
        ok = value is None or isinstance(value, bool)
    elif expected == "str|None":
        ok = value is None or isinstance(value, str)
    elif expected == "int|None":
        ok = value is None or (isinstance(value, int) and not isinstance(value, bool))
        if ok and value is not None and value < 1:
            raise OptionsError(f"option {key!r} must be >= 1 or null, got {value}")
    elif expected == "urls":
        value, ok = _urls(value, key)
    elif expected == "float|None":
        ok = value is None or (isinstance(value, (int, float)) and not isinstance(value, bool))
        if ok and value is not None:
            value = float(value)
            if not 0.0 < value <= 1.0:
                raise OptionsError(f"option {key!r} must be in (0, 1] or null, got {value}")
    elif expected == "float":
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        value = float(value) if ok else value
    elif expected == "list[str]":
        ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
        if ok:
            value = list(value)
    else:  # pragma: no cover - a programming error
        raise TypeError(expected)
    if not ok:
        raise OptionsError(f"option {key!r} has the wrong type: {value!r}")
    return value


_TYPES: dict[str, Any] = {
    "int": int, "bool": bool, "str": str, "str | None": "str|None", "int | None": "int|None",
    "list[str]": "list[str]", "dict[str, list[str]]": "urls", "float | None": "float|None",
    "Mode": str, "bool | None": "bool|None", "float": "float",
}


def _http_url(url: str, key: str) -> str:
    if not re.fullmatch(r"http://[^/\s]+(:\d+)?/?", url):
        raise OptionsError(f"option {key!r}: {url!r} is not an http://host:port URL")
    return url.rstrip("/")


def _urls(value: Any, key: str) -> tuple[dict[str, list[str]], bool]:
    """{preset: URL or [URL, ...]} with every URL checked."""
    if not isinstance(value, dict):
        return {}, False
    out: dict[str, list[str]] = {}
    for preset, urls in value.items():
        urls = [urls] if isinstance(urls, str) else urls
        if not isinstance(preset, str) or not isinstance(urls, list) or not all(isinstance(u, str) for u in urls):
            return {}, False
        if not urls:
            raise OptionsError(f"option '{key}.{preset}' lists no URL")
        out[preset] = [_http_url(u, f"{key}.{preset}") for u in urls]
    return out, True


def _merge_into(obj: Any, data: dict[str, Any], path: str, warnings: list[str]) -> None:
    fields = {f.name: f for f in dataclasses.fields(obj)}
    for raw_key, value in data.items():
        key = _snake(raw_key)
        full = f"{path}{raw_key}"
        f = fields.get(key)
        if f is None:
            warnings.append(f"unknown option {full!r} ignored")
            continue
        current = getattr(obj, key)
        if dataclasses.is_dataclass(current):
            if not isinstance(value, dict):
                raise OptionsError(f"option {full!r} must be an object")
            _merge_into(current, value, full + ".", warnings)
            continue
        expected = _TYPES[str(f.type)]
        setattr(obj, key, _check(value, expected, full))


def _unwrap(src: dict[str, Any]) -> dict[str, Any]:
    return dict(src["llada"]) if isinstance(src.get("llada"), dict) else src


def _workspace_refuses(key: str, value: Any) -> bool:
    snake = _snake(key)
    return snake in MACHINE_SCOPED or snake == NESTED_SECTION or (snake in NO_ZERO_FROM_WORKSPACE and value == 0)


def workspace_settings(src: Any) -> tuple[Any, dict[str, Any]]:
    """Settings that came from the workspace (`workspace/configuration`, pushed
    `didChangeConfiguration`) without the keys a workspace may not set; returns (the rest, the
    refused keys with their values). One `{"llada": {...}}` wrapper is taken off (as
    parse_options does); a section still nested inside (`{"llada": {"llada": {...}}}`) is
    refused whole, so that what is kept is exactly what parse_options applies. Refused: the
    machine-scoped keys and a deadline of 0 (none). Anything that is not an object is passed
    on for parse_options to refuse."""
    if not isinstance(src, dict):
        return src, {}
    data = _unwrap(src)
    kept = {k: v for k, v in data.items() if not _workspace_refuses(k, v)}
    refused = {k: v for k, v in data.items() if _workspace_refuses(k, v)}
    return kept, refused


def _clamp(opts: Options, warnings: list[str]) -> None:
    """Every numeric option within its documented range (RANGES)."""
    for name, (lo, hi) in RANGES.items():
        *outer, last = [_snake(p) for p in name.split(".")]
        obj: Any = opts
        for part in outer:
            obj = getattr(obj, part)
        value = getattr(obj, last)
        if value is not None and not lo <= value <= hi:
            clamped = min(max(value, lo), hi)
            warnings.append(f"option {name!r} must be {lo}..{hi}, got {value}: {clamped} is used")
            setattr(obj, last, clamped)


def parse_options(*sources: dict[str, Any] | None, base: Options | None = None
                  ) -> tuple[Options, list[str]]:
    """Merge option dicts (later wins) over `base` (or the defaults).

    Returns the options and a list of warnings (unknown keys). Raises OptionsError on a
    bad value; the caller reports it and keeps the previous options.
    """
    opts = dataclasses.replace(base) if base is not None else Options()
    if base is not None:  # deep copy the nested dataclasses
        opts.max_tokens = dataclasses.replace(base.max_tokens)
        opts.context = dataclasses.replace(base.context)
        opts.next_edit = dataclasses.replace(base.next_edit)
        opts.workspace_index = dataclasses.replace(base.workspace_index)
        opts.languages = list(base.languages)
        opts.exclude = list(base.exclude)
        opts.sglang = SglangOptions({k: list(v) for k, v in base.sglang.urls.items()}, base.sglang.router)
    warnings: list[str] = []
    for src in sources:
        if not src:
            continue
        if not isinstance(src, dict):
            raise OptionsError(f"options must be an object, got {type(src).__name__}")
        src = _unwrap(src)
        _merge_into(opts, src, "", warnings)
    if opts.mode not in MODES:
        raise OptionsError(f"option 'mode' must be one of {MODES}, got {opts.mode!r}")
    _clamp(opts, warnings)
    if not 0.0 <= opts.names_keep_own_above <= 2.0:
        raise OptionsError(f"option 'namesKeepOwnAbove' must be 0..2, got {opts.names_keep_own_above}")
    if opts.device not in ("cpu", "cuda", "auto"):
        raise OptionsError(f"option 'device' must be cpu, cuda or auto, got {opts.device!r}")
    if opts.dtype not in ("auto", "bfloat16", "float32", "float16"):
        raise OptionsError(f"option 'dtype' must be auto, bfloat16, float32 or float16, got {opts.dtype!r}")
    if opts.prompt_format not in ("auto", "chat", "plain"):
        raise OptionsError(f"option 'promptFormat' must be auto, chat or plain, got {opts.prompt_format!r}")
    if not (opts.engine in ("inprocess", "auto", "sglang") or opts.engine.startswith(("ws://", "wss://"))):
        raise OptionsError(
            f"option 'engine' must be 'inprocess', 'auto', 'sglang' or a ws:// URL, got {opts.engine!r}")
    _check_sglang(opts, warnings)
    return opts, warnings


def _check_sglang(opts: Options, warnings: list[str]) -> None:
    sg = opts.sglang
    if sg.router is not None:
        sg.router = _http_url(sg.router, "sglang.router")
    for preset in sg.urls:
        if preset not in MODES:
            warnings.append(f"option 'sglang.urls.{preset}': no mode of that name ({', '.join(MODES)}); "
                            "its servers serve only when asked for it")
    if opts.engine == "sglang":
        if not sg.urls and sg.router is None:
            raise OptionsError("option 'engine' is 'sglang' but 'sglang' names no server: set sglang.urls "
                               "(e.g. {\"speedy\": [\"http://host:30000\"]}) or sglang.router")
        if opts.mode not in sg.urls and sg.router is None:
            warnings.append(f"option 'sglang.urls' has no server for mode {opts.mode!r}: "
                            "the other presets' servers serve it")


def within_user(opts: Options, user: Options) -> Options:
    """Options that took the workspace's settings, bounded by the user's own (`user`: from
    `initializationOptions`): the index may hold no more than the user's limits, and the
    `exclude` patterns are the user's plus the workspace's (a workspace only adds)."""
    wi = opts.workspace_index
    wi.max_files = min(wi.max_files, user.workspace_index.max_files)
    wi.max_bytes = min(wi.max_bytes, user.workspace_index.max_bytes)
    opts.exclude = [*user.exclude, *(g for g in opts.exclude if g not in user.exclude)]
    return opts
