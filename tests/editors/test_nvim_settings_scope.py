"""The Neovim plugin and machine-scoped settings (issue 31, item 6), in a real headless Neovim
against the real server.

The plugin's configuration comes from the user's `setup()` only (a workspace's exrc /
`.nvim.lua` is not read unless the user trusts it with `:trust`, Neovim's own rule): `setup`'s
`server` table is sent as initializationOptions, and the client has no `settings`, so the
server's `workspace/configuration` pull gets nothing from it. Should a workspace-level
`settings` table reach the client anyway, the server refuses its engine URL and says so once;
a lost engine is shown by the server's window/showMessage, and `llada/status` only feeds the
status line (no second notification)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.editors.conftest import needs_model, server_command, server_env
from tests.editors.test_nvim_plugin import needs_nvim, run_lua

SCRIPT = """
local cmd = vim.json.decode(%(cmd)s)
require('llada').setup({ cmd = cmd, server = { engine = 'inprocess', speculative = false },
                         keymaps = false, enable = false })
local cfg = require('llada.lsp_config').get()
local shown = {}
local notified = {}
local notify = vim.notify
vim.notify = function(msg, level) table.insert(notified, msg) return notify(msg, level) end
cfg.handlers['window/showMessage'] = function(_, params) table.insert(shown, params.message) end
-- what a workspace-level config could add: its own engine URL in `settings`
cfg.settings = { llada = { engine = 'ws://127.0.0.1:9', model = '/tmp/elsewhere', mode = 'quality' } }
cfg.root_dir = vim.fn.getcwd()
local plain = require('llada.lsp_config').get()
local id = vim.lsp.start(cfg)
local ok = vim.wait(120000, function()
  local st = require('llada').status[id]
  return st ~= nil and (st.state == 'ready' or st.state == 'error')
end, 50)
local client = vim.lsp.get_client_by_id(id)
local res = client:request_sync('llada/debugInfo', {}, 10000)
local opts = res and res.result and res.result.options or {}
-- a status error from the server feeds the status line only
require('llada').handlers['llada/status'](nil, { state = 'error', message = 'lost' }, { client_id = id })
local after = #notified
client:stop()
print(vim.json.encode({ ready = ok and require('llada').status[id] ~= nil, engine = opts.engine, mode = opts.mode,
  model = opts.model, shown = shown, notified_on_status = after, plain_settings = plain.settings == nil,
  init_engine = plain.init_options.engine, exrc = vim.o.exrc }))
"""


@needs_nvim
@needs_model
def test_nvim_client_keeps_the_users_engine(tmp_path: Path, monkeypatch: object) -> None:
    script = SCRIPT % {"cmd": json.dumps(json.dumps(server_command()))}
    env = server_env()
    for k, v in env.items():
        monkeypatch.setenv(k, v)  # type: ignore[attr-defined]
    got = run_lua(script, tmp_path, timeout=180)
    assert got["ready"], got
    assert got["plain_settings"] and got["init_engine"] == "inprocess" and got["exrc"] is False
    assert got["engine"] == "inprocess" and got["model"] != "/tmp/elsewhere", got
    assert got["mode"] == "quality"  # the workspace's other settings still apply
    assert sum("'engine' is ignored" in m for m in got["shown"]) == 1, got["shown"]
    assert got["notified_on_status"] == 0, got
