"""Test doubles and drivers that tests and benches share (import as `tests.fakes.<module>` from
the repository root; `python -m pytest` and the bench scripts put the root on `sys.path`).

- `sglang` (the HTTP side), `sglang_scheduler`, `sglang_rows`, `sglang_contract`: a FAKE SGLang
  0.5.23 dLLM server, checked against the real wheel by tests/llada_lsp/engines/test_contract.py;
  `sglang_router`: a FAKE sglang-router 0.3.2; `sglang_cli`: the fake as a process;
  `http_server`: the minimal HTTP/1.1 server under both; `checkpoint`: a FAKE LLaDA2 checkpoint
  directory (the tiny-code tokenizer under a LLaDA2 config). Each module's docstring lists
  what it follows and what it does not model.
- `raw_lsp`: a raw JSON-RPC driver of the real server process (framed bytes, no client library).
- `vscode_real`: a driver of real VS Code (code-server + chromium through Playwright) and the
  editor tests' build lock (tests/editors/test_vscode_real.py, bench/vscode_busy.py).
- `samples/sample.py`: a small Python file the engine tests complete.
"""
