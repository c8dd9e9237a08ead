--- llada: streaming ghost-text completions from the llada-lsp language server.
---
---   require('llada').setup({ server = { mode = 'speedy' } })
---
--- setup() registers the 'llada' LSP config (lsp/llada.lua), enables it, and maps the accept
--- and dismiss keys. The suggestion is drawn by Neovim 0.12's vim.lsp.inline_completion when
--- present (else by this plugin's extmarks) and updated in place on `llada/refine`.
local api = vim.api
local config = require('llada.config')
local lc = require('llada.client')
local next_edit = require('llada.next_edit')

local M = {}

--- Next-edit suggestions: jump(), accept(), dismiss(), request(buf) (llada.next_edit).
M.next_edit = next_edit

---@type table<integer, {state: string, message: string, backend: string?, next_edit: boolean}> llada/status per client
M.status = {}
---@type table|nil the latest llada/stats
M.last_stats = nil
---@type table|nil the newest answer's llada/stats when nothing of it was shown (emptyReason says why)
M.last_empty = nil
---@type string|nil why the server could not start or stopped (statusline, :checkhealth)
M.start_error = nil
---@type table<string, true> completion ids of the answers to <M-]> / <M-[> (llada.cycle)
M.cycled = {}
local n_cycled = 0

--- Note the items of a cycle's answer: their counter shows even with one candidate ("1/1"),
--- and their stats from the candidates the server had are no new latency.
function M.note_cycled(items)
  if n_cycled > 100 then
    M.cycled, n_cycled = {}, 0
  end
  for _, it in ipairs(type(items) == 'table' and items or {}) do
    local cid = lc.completion_id(it)
    if cid and not M.cycled[cid] then
      M.cycled[cid], n_cycled = true, n_cycled + 1
    end
  end
end
---@type table<integer, true> the clients :LladaRestart stopped, until their exit (it is expected)
M.stopping = {}
local stopping = M.stopping
---@type boolean between :LladaRestart and the new server's first status
M.restarting = false
---@type table[] recent refinements seen (newest last, at most 50): for :checkhealth and tests
M.refines = {}

--- Redraw every status line and fire `User <pattern>` (after a stats or state change).
local function changed(pattern)
  vim.schedule(function()
    pcall(api.nvim_exec_autocmds, 'User', { pattern = pattern, modeline = false })
    pcall(vim.cmd.redrawstatus, { bang = true })
  end)
end

local function renderer()
  return require('llada.' .. (config.renderer() == 'builtin' and 'builtin' or 'ghost'))
end

--- Handlers for the server's notifications (referenced by lsp/llada.lua).
M.handlers = {
  ['llada/refine'] = function(_, params, ctx)
    local client = vim.lsp.get_client_by_id(ctx.client_id)
    if not client or type(params) ~= 'table' then
      return
    end
    local applied = renderer().on_refine(client, params)
    table.insert(M.refines, { completionId = tostring(params.completionId), step = params.step,
                              final = params.final, text = params.text, applied = applied })
    if #M.refines > 50 then
      table.remove(M.refines, 1)
    end
  end,
  ['llada/stats'] = function(_, params)
    if type(params) == 'table' then
      -- a cycle's answer from the candidates the server already had is no new latency, nor is
      -- an answer that came out empty (shown = false): the last suggestion's latency stays
      local cycled = M.cycled[tostring(params.completionId)]
      if params.shown == false then
        M.last_empty = params
      elseif not (cycled and params.source ~= 'engine') then
        M.last_stats = params
        M.last_empty = nil
      end
      changed('LladaStats')
    end
  end,
  -- The engine's state: loading, ready, or error (it failed to start, or was lost and the
  -- server is reconnecting). The server says so once with window/showMessage (when it fails
  -- and when it is back), which Neovim shows; here it only feeds statusline() and :checkhealth.
  ['llada/status'] = function(_, params, ctx)
    if type(params) == 'table' then
      local engine = type(params.engine) == 'table' and params.engine or {}
      local backend = type(engine.backend) == 'string' and engine.backend or nil
      M.status[ctx.client_id] = { state = params.state, message = params.message or '', backend = backend,
                                  next_edit = params.nextEdit == true,
                                  pace = type(params.pace) == 'string' and params.pace or '' }
      if not stopping[ctx.client_id] then
        M.restarting = false -- the new server speaks
      end
      next_edit.servers[ctx.client_id] = params.state == 'ready' and params.nextEdit == true
      M.start_error = nil
      changed('LladaStatus')
    end
  end,
}

--- Called by lsp/llada.lua's on_exit: a server that stopped on its own says why (one that
--- :LladaRestart stopped says nothing).
function M.exited(code, signal, client_id)
  M.status[client_id] = nil
  if stopping[client_id] then
    stopping[client_id] = nil
  elseif code ~= 0 or (signal or 0) ~= 0 then
    M.restarting = false
    M.start_error = ('the server exited (code %d%s)'):format(code or -1,
      (signal or 0) ~= 0 and (', signal ' .. signal) or '')
  end
  changed('LladaStatus')
end

--- Called by lsp/llada.lua's on_attach.
function M.attach(client, buf)
  renderer().attach(client, buf)
  if (config.options.next_edit or {}).enabled then
    next_edit.attach(buf)
  end
end

--- The suggestion shown in `buf` (text still to insert, completion id, position), or nil.
function M.current(buf)
  if buf == nil or buf == 0 then
    buf = api.nvim_get_current_buf()
  end
  return renderer().current(buf)
end

--- Accept the suggestion: 'all' (default), 'word' or 'line'. Returns false without one.
---@param kind? 'all'|'word'|'line'
function M.accept(kind)
  return renderer().accept(api.nvim_get_current_buf(), kind or 'all')
end

function M.dismiss()
  renderer().dismiss(api.nvim_get_current_buf())
end

--- Show the next (`count` 1, default) or previous (-1) candidate of the suggestion; with only
--- one, the server is asked for all that fit; with none, for a suggestion (an Invoked request).
---@param count? integer
function M.cycle(count)
  return renderer().cycle(api.nvim_get_current_buf(), count or 1)
end

local function short(msg)
  msg = (msg or ''):gsub('%s+', ' ')
  return #msg > 60 and (msg:sub(1, 57) .. '...') or msg
end

--- For statuslines: "llada 42ms" after a completion (first suggestion latency; the final
--- refinement's in parentheses when later), "llada … loading" while the model loads,
--- "llada ✗ <why> :LladaRestart" when the server or its engine failed. Redrawn on each change.
---@return string
function M.statusline()
  local buf = api.nvim_get_current_buf()
  local client = lc.get(buf)
  if client and stopping[client.id] then
    client = nil
  end
  if not client then
    if M.restarting then
      return 'llada … loading'
    end
    return M.start_error and ('llada ✗ %s :LladaRestart'):format(short(M.start_error)) or ''
  end
  local st = M.status[client.id]
  -- "llada[sglang]" when completions come from another backend than the native engine
  local name = (st and st.backend and st.backend ~= 'native') and ('llada[' .. st.backend .. ']') or 'llada'
  if not st or st.state == 'loading' then
    return name .. ' … loading'
  elseif st.state == 'error' then
    return ('%s ✗ %s :LladaRestart'):format(name, short(st.message))
  elseif st.pace and st.pace ~= '' then
    return ('%s %s'):format(name, st.pace:match('^stuck') and ('stuck: ' .. short(st.pace:sub(8))) or st.pace)
  end
  local s = M.last_stats
  if not s then
    return name
  end
  local first, total = tonumber(s.firstMs) or 0, tonumber(s.totalMs) or 0
  local out = ('%s %dms'):format(name, math.floor(first + 0.5))
  if total > first + 1 then
    out = out .. (' (%dms)'):format(math.floor(total + 0.5))
  end
  if s.cacheHit then
    out = out .. ' ⚡'
  end
  return out
end

--- One expr mapping: run `fn` after the key (textlock) when `active()` says so, else insert
--- the key.
local function map(lhs, fn, active)
  if not lhs then
    return
  end
  vim.keymap.set('i', lhs, function()
    if not active() then
      return vim.keycode(lhs)
    end
    vim.schedule(fn)
    return ''
  end, { expr = true, replace_keycodes = false, desc = 'llada: ' .. lhs })
end

--- A suggestion is shown (accept and dismiss act on it); not while the completion menu has
--- the keys.
local function shown()
  return not config.menu_open() and M.current() ~= nil
end

--- The buffer has the llada client (cycling asks for a suggestion when none is shown).
local function attached()
  return not config.menu_open() and lc.get(api.nvim_get_current_buf()) ~= nil
end

--- Normal-mode keys of the next-edit suggestions: act when some are shown, else the key itself.
local function map_next_edit(keys)
  if not keys then
    return
  end
  for name, fn in pairs({ jump = next_edit.jump, accept = next_edit.accept, accept_all = next_edit.accept_all,
                          dismiss = next_edit.dismiss }) do
    local lhs = keys[name]
    if lhs then
      vim.keymap.set('n', lhs, function()
        if not next_edit.active() then
          return vim.keycode(lhs)
        end
        vim.schedule(fn)
        return ''
      end, { expr = true, replace_keycodes = false, desc = 'llada: next edit ' .. name })
    end
  end
end

--- Stop the llada servers and start them again (the engine daemon too, even after
--- `llada-engine stop`: the new server asks for it explicitly).
function M.restart()
  M.restarting = true
  M.last_stats = nil -- the old server's latency is not the new one's
  M.last_empty = nil
  for _, client in ipairs((vim.lsp.get_clients or vim.lsp.get_active_clients)({ name = lc.NAME })) do
    stopping[client.id] = true -- its exit (code 0, signal 15) is no failure
    if vim.fn.has('nvim-0.11') == 1 then client:stop(true) else client.stop(true) end
  end
  M.start_error = config.cmd_problem()
  changed('LladaStatus')
  local env = vim.tbl_extend('force', config.options.cmd_env or {}, { LLADA_ENGINE_RESTART = '1' })
  vim.defer_fn(function() -- the old clients are detached first (a new one is started, not reused)
    if M.start_error then
      M.restarting = false
      changed('LladaStatus')
      return
    end
    if vim.lsp.config then
      vim.lsp.config('llada', { cmd = config.cmd(), cmd_env = env })
      vim.lsp.enable('llada', false)
      vim.lsp.enable('llada')
    else
      for _, buf in ipairs(api.nvim_list_bufs()) do
        if api.nvim_buf_is_loaded(buf) and vim.bo[buf].buftype == '' and vim.bo[buf].filetype ~= '' then
          local cfg = require('llada.lsp_config').get()
          cfg.cmd_env = env
          vim.lsp.start(cfg, { bufnr = buf })
        end
      end
    end
    changed('LladaStatus')
  end, 100)
end

--- LladaGhost: Comment's colours, with a 256-colour grey for terminals without 'termguicolors'
--- (Comment often has a `guifg` only: the suggestion would be drawn like real code).
local function ghost_highlight()
  local c = api.nvim_get_hl(0, { name = 'Comment', link = false })
  api.nvim_set_hl(0, 'LladaGhost', { fg = c.fg, bg = c.bg, italic = c.italic, ctermfg = c.ctermfg or 242,
                                     ctermbg = c.ctermbg, cterm = c.cterm, default = true })
end

---@param opts? table see llada.config
function M.setup(opts)
  local o = config.set(opts)
  M.start_error = o.enable and config.cmd_problem() or nil
  api.nvim_create_user_command('LladaRestart', M.restart,
    { desc = 'llada: restart the server (and the engine daemon)' })
  ghost_highlight()
  api.nvim_create_autocmd('ColorScheme', { group = api.nvim_create_augroup('llada.hl', { clear = true }),
                                           callback = ghost_highlight })
  api.nvim_set_hl(0, 'LladaGhostReplaced', { strikethrough = true, default = true }) -- what it replaces
  api.nvim_set_hl(0, 'LladaGhostCounter', { link = 'MoreMsg', default = true }) -- "llada 2/3"
  api.nvim_set_hl(0, 'LladaNextEditOld', { link = 'DiffDelete', default = true })
  api.nvim_set_hl(0, 'LladaNextEditNew', { link = 'DiffAdd', default = true })
  api.nvim_set_hl(0, 'LladaNextEditInfo', { link = 'Comment', default = true })
  api.nvim_set_hl(0, 'LladaNextEditPlaceholder', -- a placeholder to type over, as a snippet's
    { link = vim.fn.has('nvim-0.10') == 1 and 'SnippetTabstop' or 'Visual', default = true })
  local actions = { jump = next_edit.jump, accept = next_edit.accept, accept_all = next_edit.accept_all,
                   dismiss = next_edit.dismiss,
                   request = function() next_edit.request(api.nvim_get_current_buf()) end }
  api.nvim_create_user_command('LladaNextEdit', function(c)
    local fn = actions[c.args ~= '' and c.args or 'jump']
    if not fn then
      vim.notify('llada: :LladaNextEdit jump|accept|accept_all|dismiss|request', vim.log.levels.ERROR)
      return
    end
    fn()
  end, { nargs = '?', complete = function() return vim.tbl_keys(actions) end,
         desc = 'llada: next-edit suggestions' })
  map_next_edit(o.next_edit and o.next_edit.keymaps)
  if vim.lsp.config then -- Neovim 0.11+: lsp/llada.lua is the base, these override it
    local overrides = { cmd = config.cmd(), init_options = o.server, cmd_env = o.cmd_env }
    if o.filetypes then
      overrides.filetypes = o.filetypes
    end
    vim.lsp.config('llada', overrides)
    if o.enable then
      vim.lsp.enable('llada')
    end
  elseif o.enable then -- Neovim 0.10: start the client per buffer
    api.nvim_create_autocmd('FileType', {
      group = api.nvim_create_augroup('llada.start', { clear = true }),
      callback = function(ev)
        if vim.bo[ev.buf].buftype ~= '' then
          return
        end
        if o.filetypes and not vim.tbl_contains(o.filetypes, vim.bo[ev.buf].filetype) then
          return
        end
        vim.lsp.start(require('llada.lsp_config').get(), { bufnr = ev.buf })
      end,
    })
  end
  local k = o.keymaps
  if k then
    map(k.accept, function() M.accept('all') end, shown)
    map(k.accept_word, function() M.accept('word') end, shown)
    map(k.accept_line, function() M.accept('line') end, shown)
    map(k.dismiss, M.dismiss, shown)
    map(k.next, function() M.cycle(1) end, attached)
    map(k.prev, function() M.cycle(-1) end, attached)
  end
  return M
end

return M
