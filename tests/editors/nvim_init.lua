-- init.lua of the Neovim under test: the plugin from this repository, configured from
-- $LLADA_TEST_SETUP (JSON: the options of require('llada').setup).
local root = vim.fn.fnamemodify(debug.getinfo(1, 'S').source:sub(2), ':p:h:h:h')
vim.opt.runtimepath:prepend(root .. '/editors/nvim')
vim.o.swapfile = false
vim.o.shortmess = vim.o.shortmess .. 'AIF'
local opts = vim.json.decode(vim.env.LLADA_TEST_SETUP or '{}')
require('llada').setup(opts)

-- Test instrumentation: count inline completion requests sent and answered.
_G.llada_test = { sent = 0, done = 0, answers = {} }
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
    end
  end,
})
