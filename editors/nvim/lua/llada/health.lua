--- :checkhealth llada
local M = {}

function M.check()
  local h = vim.health
  local config = require('llada.config')
  local llada = require('llada')
  h.start('llada: Neovim')
  local v = vim.version()
  local version = ('%d.%d.%d'):format(v.major, v.minor, v.patch)
  if vim.fn.has('nvim-0.11') == 1 then
    h.ok('Neovim ' .. version)
  elseif vim.fn.has('nvim-0.10') == 1 then
    h.warn('Neovim ' .. version .. ': lsp/llada.lua needs 0.11; setup() starts the client itself')
  else
    h.error('Neovim ' .. version .. ': 0.10 or newer is required')
  end
  local r = config.renderer()
  if r == 'builtin' then
    local b = require('llada.builtin')
    if b.can_refine() then
      h.ok('renderer: built-in vim.lsp.inline_completion, refinements update it in place')
    else
      h.warn('renderer: built-in vim.lsp.inline_completion, but its internals differ: '
        .. "refinements show on the next request (set renderer = 'extmark' to see them live)")
    end
  else
    h.ok('renderer: llada extmarks' .. (config.has_builtin() and ' (chosen in setup)' or
      ' (this Neovim has no vim.lsp.inline_completion)'))
  end

  h.start('llada: server')
  local cmd = config.cmd()
  local exe = vim.fn.exepath(cmd[1])
  local problem = config.cmd_problem()
  if exe ~= '' and not problem then
    local _, where = config.find_server()
    local from = (config.options.cmd or config.options.server_path) and 'setup()' or where
    h.ok('server command: ' .. table.concat(cmd, ' ') .. ' (' .. exe .. ', from ' .. from .. ')')
  else
    h.error(problem or ('server not found: ' .. cmd[1]),
      { 'run ./dev demo in the llada-lsp checkout (it creates .venv/bin/llada-lsp), or set server_path / cmd in setup(), or $LLADA_LSP' })
  end
  if vim.env.LLADA_MODEL then
    h.info('model: $LLADA_MODEL = ' .. vim.env.LLADA_MODEL)
  end
  h.info('initializationOptions: ' .. vim.inspect(config.options.server, { newline = ' ', indent = '' }))
  local clients = vim.lsp.get_clients({ name = 'llada' })
  if #clients == 0 then
    h.warn('no llada client is running (open a file; check vim.lsp.enable("llada"))')
  end
  for _, c in ipairs(clients) do
    local st = llada.status[c.id]
    local state = st and st.state or 'starting'
    local msg = ('client %d: %s%s, %d buffer(s), positions %s'):format(
      c.id, state, st and st.message ~= '' and (' (' .. st.message .. ')') or '',
      vim.tbl_count(c.attached_buffers), c.offset_encoding)
    if state == 'error' then
      h.error(msg)
    elseif state == 'ready' then
      h.ok(msg)
    else
      h.info(msg)
    end
  end
  local s = llada.last_stats
  if s then
    h.info(('last completion: first %.0f ms, total %.0f ms, %s forwards, %.2f tokens/forward, %s')
      :format(tonumber(s.firstMs) or 0, tonumber(s.totalMs) or 0, tostring(s.forwards),
        tonumber(s.tpf) or 0, s.cacheHit and 'cache hit' or tostring(s.source or 'engine')))
  end
  local e = llada.last_empty
  if e then
    h.info(('last request (completion %s): nothing shown, %s'):format(tostring(e.completionId),
      type(e.emptyReason) == 'string' and e.emptyReason or 'no suggestion'))
  end
end

return M
