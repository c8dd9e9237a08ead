"""Runs request bodies through the sglang 0.5.23 wheel's own `/generate` request handling, in a
subprocess of the contract test (tests/llada_lsp/engines/test_contract.py), without its CUDA stack.

    python sglang_contract_probe.py WHEEL_DIR VOCAB_SIZE < requests.jsonl > verdicts.jsonl

Each input line is `[path, body]`: `/generate` bodies are checked as below, `/abort_request`
bodies as `abort_verdict` says.

Per body, in the order the server runs them (`srt/entrypoints/http_server.py:generate_request`,
`srt/managers/tokenizer_manager.py`):
1. `srt/entrypoints/api_contract.py:generate_contract_error` (the schema check, HTTP 400);
2. FastAPI's parse of the body into `srt/managers/io_struct.py:GenerateReqInput` (pydantic),
   then `GenerateReqInput.normalize_batch_and_arguments` (validation, rid, batch size);
3. `srt/sampling/sampling_params.py:SamplingParams(**sampling_params)`, `.normalize`, and
   `.verify(vocab_size)` (`TokenizerManager._create_tokenized_object`).
A verdict is `{"ok": true, "rid", "is_single", "stream", "max_new_tokens", "stop_token_ids"}`
or `{"ok": false, "stage", "error"}`.

Only the wheel's package `__init__` files are skipped and these modules are STUBBED (each
pulls the CUDA/model stack; none takes part in a single text-less request's handling):
- `zmq`, `zmq.asyncio`: empty modules (io_struct only names their types);
- `sglang.srt.utils` (package init): `ImageData`, `VideoData`, `ConcurrentCounter`
  placeholders; its submodules load for real;
- `sglang.srt.managers.schedule_batch`: `Modality` (an enum), `MultimodalProcessorOutput` (an
  empty struct), the `ReturnHiddenStatesMode` / `SamplingLogprobsMode` type aliases as
  written there, and `get_return_hidden_states_mode` keeping its check (True, False, "last");
- `sglang.srt.multimodal.mm_utils`: `has_valid_data` (None -> False, a list -> any item, else True).
Real: api_contract, api/v1/api_types, io_struct, sampling_params and what they import besides
(msgspec, pydantic, torch, numpy).
"""

from __future__ import annotations

import enum
import importlib
import json
import sys
import types
from pathlib import Path
from typing import Any, Literal, Union


def _package(root: Path, name: str, **attrs: Any) -> None:
    m = types.ModuleType(name)
    m.__path__ = [str(root / name.replace(".", "/"))]
    m.__dict__.update(attrs)
    sys.modules[name] = m


def _module(name: str, **attrs: Any) -> None:
    m = types.ModuleType(name)
    m.__dict__.update(attrs)
    sys.modules[name] = m


def _hidden_states_mode(mode: Any) -> Any:
    if mode is True or mode is False or mode == "last":
        return mode
    raise ValueError("return_hidden_states must be a boolean or the string literal 'last'.")


def _has_valid_data(data: Any) -> bool:
    if data is None:
        return False
    if isinstance(data, list):
        return any(_has_valid_data(x) for x in data)
    return True


def install_stubs(root: Path) -> None:
    import msgspec

    for name in ("sglang", "sglang.srt", "sglang.srt.managers", "sglang.srt.entrypoints"):
        _package(root, name)
    _package(root, "sglang.srt.utils", ImageData=object, VideoData=object, ConcurrentCounter=object)
    _module("zmq")
    _module("zmq.asyncio")
    sys.modules["zmq"].asyncio = sys.modules["zmq.asyncio"]  # type: ignore[attr-defined]

    class MultimodalProcessorOutput(msgspec.Struct, kw_only=True, dict=True, array_like=True, weakref=True):
        pass

    _module("sglang.srt.managers.schedule_batch",
            Modality=enum.Enum("Modality", "IMAGE MULTI_IMAGES VIDEO AUDIO"),
            MultimodalProcessorOutput=MultimodalProcessorOutput,
            ReturnHiddenStatesMode=Union[bool, Literal["last"]],  # noqa: UP007 - as schedule_batch.py writes it
            SamplingLogprobsMode=Literal["selected", "support"],
            get_return_hidden_states_mode=_hidden_states_mode)
    _module("sglang.srt.multimodal.mm_utils", has_valid_data=_has_valid_data)


def abort_verdict(body: Any) -> dict[str, Any]:
    """`/abort_request`: FastAPI parses the body into `io_struct.AbortReq` (pydantic, through
    the struct's own core schema), then `TokenizerManager.abort_request(rid, abort_all)`."""
    from pydantic import TypeAdapter
    from sglang.srt.managers.io_struct import AbortReq

    try:
        obj = TypeAdapter(AbortReq).validate_python(body)
    except ValueError as e:
        return {"ok": False, "stage": "parse", "error": str(e)[:500]}
    return {"ok": True, "rid": obj.rid, "abort_all": obj.abort_all}


def verdict(body: Any, vocab_size: int) -> dict[str, Any]:
    from pydantic import TypeAdapter
    from sglang.srt.entrypoints.api_contract import generate_contract_error
    from sglang.srt.managers.io_struct import GenerateReqInput
    from sglang.srt.sampling.sampling_params import SamplingParams

    err = generate_contract_error(body)
    if err is not None:
        return {"ok": False, "stage": "contract", "error": err}
    try:
        obj = TypeAdapter(GenerateReqInput).validate_python(body)
    except ValueError as e:
        return {"ok": False, "stage": "parse", "error": str(e)[:500]}
    try:
        obj.normalize_batch_and_arguments()
    except ValueError as e:
        return {"ok": False, "stage": "normalize", "error": str(e)}
    try:
        sp = SamplingParams(**(obj.sampling_params or {}))
        sp.normalize(None)
        sp.verify(vocab_size)
    except (ValueError, TypeError) as e:
        return {"ok": False, "stage": "sampling_params", "error": str(e)}
    return {"ok": True, "rid": obj.rid, "is_single": obj.is_single, "stream": obj.stream,
            "max_new_tokens": sp.max_new_tokens, "stop_token_ids": sorted(sp.stop_token_ids or [])}


def main() -> None:
    root, vocab = Path(sys.argv[1]), int(sys.argv[2])
    install_stubs(root)
    sys.path.insert(0, str(root))
    importlib.invalidate_caches()
    for line in sys.stdin:
        if line.strip():
            path, body = json.loads(line)
            out = abort_verdict(body) if path == "/abort_request" else verdict(body, vocab)
            print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
