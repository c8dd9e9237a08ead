-- init.lua of the Neovim under test: the plugin from this repository, configured from
-- $LLADA_TEST_SETUP (JSON: the options of require('llada').setup).
local root = vim.fn.fnamemodify(debug.getinfo(1, 'S').source:sub(2), ':p:h:h:h')
vim.opt.runtimepath:prepend(root .. '/editors/nvim')
vim.o.swapfile = false
vim.o.shortmess = vim.o.shortmess .. 'AIF'
local opts = vim.json.decode(vim.env.LLADA_TEST_SETUP or '{}')
require('llada').setup(opts)

-- Test instrumentation: count inline completion requests sent and answered. `done` counts
-- answers as they arrive; `handled` counts them once the client's handler has run (drawn the
-- suggestion or nothing) and `cancelled` the ones that will never reach it, so a driver can
-- tell "answered, nothing to show" from "answered, not drawn yet".
_G.llada_test = { sent = 0, done = 0, handled = 0, cancelled = 0, answers = {}, stats = {} }
-- every llada/stats as it came (the plugin's handler, looked up per message, still runs)
local llada = require('llada')
local on_stats = llada.handlers['llada/stats']
llada.handlers['llada/stats'] = function(err, params, ctx)
  table.insert(_G.llada_test.stats, { id = params.completionId, shown = params.shown, firstMs = params.firstMs,
                                      emptyReason = params.emptyReason })
  return on_stats(err, params, ctx)
end
vim.api.nvim_create_autocmd('LspAttach', {
  callback = function(ev)
    local client = vim.lsp.get_client_by_id(ev.data.client_id)
    if not client or client._llada_test_wrapped or vim.fn.has('nvim-0.11') == 0 then
      return
    end
    client._llada_test_wrapped = true
    local request = client.request
    client.request = function(self, method, params, handler, bufnr)
      if method == 'textDocument/inlineCompletion' and handler then
        local inner = handler
        handler = function(...)
          local err, res0 = ...
          local items = type(res0) == 'table' and (res0.items or res0) or {}
          table.insert(_G.llada_test.answers, { n = #items, err = err and err.message or nil,
            text = items[1] and (type(items[1].insertText) == 'table' and items[1].insertText.value
              or items[1].insertText) or nil })
          local ok, res = pcall(inner, ...)
          _G.llada_test.handled = _G.llada_test.handled + 1
          if not ok then
            error(res)
          end
          return res
        end
      end
      return request(self, method, params, handler, bufnr)
    end
  end,
})
vim.api.nvim_create_autocmd('LspRequest', {
  callback = function(ev)
    local r = ev.data and ev.data.request
    if not r or r.method ~= 'textDocument/inlineCompletion' then
      return
    end
    if r.type == 'pending' then
      _G.llada_test.sent = _G.llada_test.sent + 1
    elseif r.type == 'complete' or r.type == 'cancel' then
      _G.llada_test.done = _G.llada_test.done + 1
      if r.type == 'cancel' then
        _G.llada_test.cancelled = _G.llada_test.cancelled + 1
      end
    end
  end,
})
