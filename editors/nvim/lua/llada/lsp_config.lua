--- The 'llada' client configuration (returned by lsp/llada.lua; used directly on 0.10).
local M = {}

---@return vim.lsp.Config
function M.get()
  local config = require('llada.config')
  local o = config.options
  local handlers = {}
  for method in pairs(require('llada').handlers) do
    handlers[method] = function(...)
      return require('llada').handlers[method](...)
    end
  end
  return {
    name = 'llada',
    cmd = config.cmd(),
    cmd_env = o.cmd_env,
    filetypes = o.filetypes,
    root_markers = { '.git' },
    init_options = o.server,
    handlers = handlers,
    on_attach = function(client, buf)
      require('llada').attach(client, buf)
    end,
    on_exit = function(code, signal, client_id)
      require('llada').exited(code, signal, client_id)
    end,
  }
end

return M
