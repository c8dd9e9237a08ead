"""The `/generate` request checks of sglang 0.5.23, for the fake server (`tests.fakes.sglang`).

A fake for tests and benches. Each check cites the 0.5.23 code it follows (the wheel,
`sglang/...`); the wording of the messages is the real server's, the code is ours.

- `contract_error`: `srt/entrypoints/http_server.py:generate_request` runs
  `srt/entrypoints/api_contract.py:generate_contract_error` on the parsed body first; a
  violation answers HTTP 400 `{"error": "<text>"}` (a bare string). The text is serde's, from
  `api/v1/api_types.py` (`_unknown_field`, `_invalid_type`): sampling params reject unknown
  keys (`decode_SamplingParams`), the request object ignores them (`decode_GenerateRequest`).
- `request_error`: the ValueErrors raised later (`srt/managers/io_struct.py:
  GenerateReqInput._validate_inputs`, `_determine_batch_size`,
  `srt/sampling/sampling_params.py:SamplingParams.verify`, duplicate rids in
  `srt/managers/tokenizer_manager.py`). Non-streaming they answer 400
  `{"error": {"message": ...}}` (`http_server.py:_create_error_response`); streaming, the
  response is already 200 and the error is one SSE event
  `{"error": {"message", "type": "invalid_request_error", "code": 400, "retryable": false}}`
  before `[DONE]` (`http_server.py:serve_generate_request.stream_results`).
Only the single-request forms are checked (no batches, no `n > 1`).
"""

from __future__ import annotations

import math
from typing import Any

# api/v1/api_types.py:_FIELDS_SamplingParams, in its order (the order shows in the message).
SAMPLING_FIELDS: tuple[str, ...] = (
    "max_new_tokens", "stop", "stop_token_ids", "stop_regex", "temperature", "top_p", "top_k",
    "min_p", "frequency_penalty", "presence_penalty", "repetition_penalty", "min_new_tokens",
    "n", "json_schema", "regex", "ebnf", "structural_tag", "ignore_eos", "skip_special_tokens",
    "spaces_between_special_tokens", "no_stop_trim", "stream_interval", "logit_bias",
    "sampling_seed", "custom_params", "beam_width", "watermark", "choice",
)
_INT = {"max_new_tokens", "top_k", "min_new_tokens", "n", "stream_interval", "sampling_seed", "beam_width"}
_FLOAT = {"temperature", "top_p", "min_p", "frequency_penalty", "presence_penalty", "repetition_penalty"}
_BOOL = {"ignore_eos", "skip_special_tokens", "spaces_between_special_tokens", "no_stop_trim"}
_STR_OR_LIST = {"stop", "stop_regex"}

# api/v1/api_types.py:SamplingParams defaults (the ones the fake reads).
DEFAULTS: dict[str, Any] = {
    "max_new_tokens": 128, "temperature": 1.0, "top_p": 1.0, "top_k": 1073741824, "min_p": 0.0,
    "frequency_penalty": 0.0, "presence_penalty": 0.0, "repetition_penalty": 1.0,
    "min_new_tokens": 0, "ignore_eos": False, "no_stop_trim": False,
}


def _unexpected(v: Any) -> str:
    """serde's `Unexpected` display (api_types.py:_unexpected)."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return f"boolean `{'true' if v else 'false'}`"
    if isinstance(v, int):
        return f"integer `{v}`"
    if isinstance(v, float):
        return f"floating point `{v}`"
    if isinstance(v, str):
        return f'string "{v}"'
    return "sequence" if isinstance(v, list) else "map" if isinstance(v, dict) else type(v).__name__


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _sampling_error(sp: Any) -> str | None:
    if not isinstance(sp, dict):
        return f"invalid type: {_unexpected(sp)}, expected a value or an array of values for SamplingParamsOrList"
    for key, v in sp.items():
        if key not in SAMPLING_FIELDS:
            listed = ", ".join(f"`{f}`" for f in SAMPLING_FIELDS)
            return f"unknown field `{key}`, expected one of {listed}"
        if v is None:
            continue
        if key in _INT and not _is_int(v):
            return f"invalid type: {_unexpected(v)}, expected i64"
        if key in _FLOAT and not (_is_int(v) or isinstance(v, float)):
            return f"invalid type: {_unexpected(v)}, expected f64"
        if key in _BOOL and not isinstance(v, bool):
            return f"invalid type: {_unexpected(v)}, expected a boolean"
        if key in _STR_OR_LIST:
            items = v if isinstance(v, list) else [v]
            bad = next((e for e in items if not isinstance(e, str)), None)
            if bad is not None or not items and not isinstance(v, list):
                what = "a string" if isinstance(v, list) else "a value or an array of values for StringOrList"
                return f"invalid type: {_unexpected(bad if isinstance(v, list) else v)}, expected {what}"
        if key == "stop_token_ids":
            if not isinstance(v, list):
                return f"invalid type: {_unexpected(v)}, expected a sequence"
            bad = next((e for e in v if not _is_int(e)), None)
            if bad is not None:
                return f"invalid type: {_unexpected(bad)}, expected i64"
    return None


def contract_error(body: Any) -> str | None:
    """The schema violation in a `/generate` body, as `generate_contract_error` words it."""
    if not isinstance(body, dict):
        return f"invalid type: {_unexpected(body)}, expected struct GenerateRequest"
    for key in ("rid", "text"):
        v = body.get(key)
        if v is not None and not isinstance(v, (str, list)):
            return f"invalid type: {_unexpected(v)}, expected a value or an array of values for StringOrList"
    ids = body.get("input_ids")
    if ids is not None:
        if not isinstance(ids, list):
            return f"invalid type: {_unexpected(ids)}, expected a value or an array of values for TokenIdsOrList"
        bad = next((e for e in ids if not _is_int(e)), None)
        if bad is not None and not isinstance(bad, list):
            return f"invalid type: {_unexpected(bad)}, expected i64"
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        return f"invalid type: {_unexpected(stream)}, expected a boolean"
    sp = body.get("sampling_params")
    if sp is None:
        return None
    if isinstance(sp, list):
        return next((e for e in map(_sampling_error, sp) if e is not None), None)
    return _sampling_error(sp)


def request_error(body: dict[str, Any], live_rids: set[str]) -> str | None:
    """The ValueError text the tokenizer manager raises for this single request, or None."""
    if body.get("text") is None and body.get("input_ids") is None and body.get("input_embeds") is None:
        return "Either text, input_ids or input_embeds should be provided."
    if body.get("text") is None and body.get("input_ids") == []:
        return "input_ids cannot be empty."
    if isinstance(body.get("text"), list) or (body.get("input_ids") and isinstance(body["input_ids"][0], list)):
        return "the fake serves single requests only (no batches)"
    rid = body.get("rid")
    if isinstance(rid, str) and rid in live_rids:
        return f"Duplicate request ID detected: {rid}"
    return verify_sampling(sampling_params(body))


def sampling_params(body: dict[str, Any]) -> dict[str, Any]:
    """The request's sampling params over the schema defaults."""
    return {**DEFAULTS, **{k: v for k, v in (body.get("sampling_params") or {}).items() if v is not None}}


def verify_sampling(sp: dict[str, Any]) -> str | None:
    """srt/sampling/sampling_params.py:SamplingParams.verify, the checks the fake can make."""
    t, mx, mn = float(sp["temperature"]), sp["max_new_tokens"], sp["min_new_tokens"]
    if not math.isfinite(t) or t < 0.0:
        return f"temperature must be a non-negative finite number, got {t}."
    if not 0.0 < sp["top_p"] <= 1.0:
        return f"top_p must be in (0, 1], got {sp['top_p']}."
    if not 0.0 <= sp["min_p"] <= 1.0:
        return f"min_p must be in [0, 1], got {sp['min_p']}."
    if sp["top_k"] < 1 or sp["top_k"] == -1:
        return f"top_k must be -1 (disable) or at least 1, got {sp['top_k']}."
    for name in ("frequency_penalty", "presence_penalty"):
        if not -2.0 <= sp[name] <= 2.0:
            return f"{name} must be in [-2, 2], got {sp[name]}."
    if not 0.0 < sp["repetition_penalty"] <= 2.0:
        return f"repetition_penalty must be in (0, 2] (1.0 = no penalty), got {sp['repetition_penalty']}."
    if mn < 0:
        return f"min_new_tokens must be in [0, max_new_tokens], got {mn}."
    if mx is not None and mx < 0:
        return f"max_new_tokens must be at least 0, got {mx}."
    if mx is not None and mn > mx:
        return f"min_new_tokens must be in [0, max_new_tokens({mx})], got {mn}."
    return None


def stop_strings(sp: dict[str, Any]) -> list[str]:
    stop = sp.get("stop")
    if stop is None:
        return []
    return [stop] if isinstance(stop, str) else list(stop)
