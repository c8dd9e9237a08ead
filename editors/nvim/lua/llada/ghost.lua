--- The plugin's own ghost text renderer (extmarks): requests textDocument/inlineCompletion
--- while typing, draws the suggestion at the cursor, and redraws the same extmark in place
--- when `llada/refine` arrives. Used when the built-in vim.lsp.inline_completion is absent
--- (Neovim < 0.12) or when `renderer = 'extmark'`.
local api = vim.api
local config = require('llada.config')
local draw_mod = require('llada.draw')
local lc = require('llada.client')
local text = require('llada.text')

local M = {}

M.ns = api.nvim_create_namespace('llada.ghost')

---@class llada.Ghost
---@field client_id integer
---@field cid string|nil     completion id
---@field item table         the LSP item
---@field items table[]      every item of the answer (cycling moves among them)
---@field index integer      which of them is shown
---@field full string        the whole suggestion (refinements applied)
---@field used integer       bytes of `full` already typed or accepted
---@field row integer        where the rest is drawn (0-based)
---@field col integer        byte column (0-based)
---@field mark integer|nil   extmark id (kept across redraws: updates in place)
---@field old string         the line's bytes after `col` the item replaces ('' : an insertion)
---@field ids llada.DrawIds|nil the extmarks drawn (llada.draw)
---@field shown boolean      didShowCompletion sent

---@type table<integer, llada.Ghost>
M.ghosts = {}
---@type table<integer, {timer: uv.uv_timer_t|nil, request: integer|nil, client_id: integer|nil}>
local pending = {}
local inline_ok = vim.fn.has('nvim-0.10') == 1

local function cursor()
  local pos = api.nvim_win_get_cursor(0)
  return pos[1] - 1, pos[2]
end

local function rest(g)
  return g.full:sub(g.used + 1)
end

--- The candidate counter drawn apart from the text ("llada 2/3"), when there are several.
local function hint(g)
  local n = g.items and #g.items or 0
  return (n > 1 or (n == 1 and g.cycled)) and ('llada %d/%d'):format(g.index, n) or nil
end

local function draw(buf, g)
  local o = config.options
  if not inline_ok then -- Neovim 0.9: no inline virtual text; at the end of the line
    local lines = text.lines(rest(g))
    local virt_lines = {}
    for i = 2, #lines do
      table.insert(virt_lines, { { lines[i], o.hl_group } })
    end
    local ok, id = pcall(api.nvim_buf_set_extmark, buf, M.ns, g.row, g.col, {
      id = g.mark, virt_text = { { lines[1], o.hl_group } }, virt_text_pos = 'eol',
      virt_lines = #virt_lines > 0 and virt_lines or nil, hl_mode = 'combine' })
    g.mark = ok and id or g.mark
    return
  end
  g.ids = draw_mod.show(buf, M.ns, g.row, g.col, rest(g), g.old or '',
    { hl = o.hl_group, hl_old = 'LladaGhostReplaced', hl_counter = 'LladaGhostCounter', hint = hint(g) },
    g.ids or { mark = g.mark })
  g.mark = g.ids.mark
end

--- Hide the suggestion of `buf`.
function M.clear(buf)
  local g = M.ghosts[buf]
  M.ghosts[buf] = nil
  if g and api.nvim_buf_is_valid(buf) then
    draw_mod.clear(buf, M.ns, g.ids or { mark = g.mark })
  end
end

local function cancel_pending(buf)
  lc.stop_pending(pending[buf])
end

--- Keep the suggestion when the user types what it suggests (type-through), else hide it.
function M.sync(buf)
  local g = M.ghosts[buf]
  if not g then
    return
  end
  local row, col = cursor()
  if row == g.row and col == g.col then
    return
  end
  if row == g.row and col > g.col then
    local typed = api.nvim_buf_get_lines(buf, row, row + 1, false)[1]:sub(g.col + 1, col)
    local e = draw_mod.edit(g.col, rest(g), g.old or '')
    local r = e.new_mid
    if e.old_mid == '' and e.at == g.col and #typed < #r and r:sub(1, #typed) == typed then
      g.used = g.used + #typed
      g.col = col
      draw(buf, g)
      return
    end
  end
  M.clear(buf)
end

--- Show item `index` of `items` at (row, col).
local function show(buf, client, row, col, items, index)
  local item = items[index]
  local new = item and lc.insert_text(item) or ''
  if item and item.range then -- the item may restate text between range.start and the cursor
    local s = item.range.start
    if s.line == row and s.character < col then
      local line = api.nvim_buf_get_lines(buf, row, row + 1, false)[1]
      local typed = line:sub(text.offset(line, s, client.offset_encoding) + 1, col)
      if new:sub(1, #typed) == typed then
        new = new:sub(#typed + 1)
      end
    end
  end
  -- the part of the line after the cursor that the item's range covers (the server's range
  -- runs over the rest of the line a mid-line suggestion replaces)
  local old = ''
  if item and item.range then
    local line = api.nvim_buf_get_lines(buf, row, row + 1, false)[1] or ''
    local e = item.range['end']
    if e.line == row then
      old = line:sub(col + 1, text.offset(line, e, client.offset_encoding))
    end
  end
  if draw_mod.edit(col, new, old).new_mid == '' and new == old then
    M.clear(buf)
    return
  end
  local prev = M.ghosts[buf]
  local g = {
    client_id = client.id, cid = lc.completion_id(item), item = item, items = items, index = index,
    full = new, used = 0, row = row, col = col, old = old, shown = false,
    cycled = require('llada').cycled[lc.completion_id(item) or ''] == true,
    mark = prev and prev.mark or nil, ids = prev and prev.ids or nil,
  }
  M.ghosts[buf] = g
  draw(buf, g)
  g.shown = true
  lc.notify(client, 'textDocument/didShowCompletion', { item = item })
end

--- The answer to a request made at (row, col) when the buffer was at `tick`, unless stale.
local function on_result(buf, client, tick, row, col, err, result, index, invoked)
  local p = pending[buf]
  if p then
    p.request = nil
  end
  if err or not api.nvim_buf_is_valid(buf) or api.nvim_get_current_buf() ~= buf then
    return
  end
  local r, c = cursor()
  if api.nvim_buf_get_changedtick(buf) ~= tick or r ~= row or c ~= col
    or not api.nvim_get_mode().mode:match('^i') or config.menu_open() then
    return -- stale: the user moved on; a newer request is on its way
  end
  local items = result and (result.items or result) or {}
  if invoked then -- the answer to a cycle: its counter shows even with one candidate
    require('llada').note_cycled(items)
  end
  local i = index or 1
  if i < 0 then
    i = #items + 1 + i -- counted from the end
  end
  show(buf, client, row, col, items, math.max(1, math.min(i, #items)))
end

--- Ask the server for a suggestion at the cursor (after the debounce delay). `invoked`: the
--- user asked (triggerKind Invoked: the server answers every candidate), then show item `index`.
function M.request(buf, delay, invoked, index)
  local client = lc.get(buf)
  if not client then
    return
  end
  cancel_pending(buf)
  pending[buf] = pending[buf] or {}
  local p = pending[buf]
  local function fire()
    if not api.nvim_buf_is_valid(buf) or api.nvim_get_current_buf() ~= buf
      or not api.nvim_get_mode().mode:match('^i') or config.menu_open() then
      return
    end
    local row, col = cursor()
    local tick = api.nvim_buf_get_changedtick(buf)
    local params = vim.lsp.util.make_position_params(0, client.offset_encoding)
    params.context = { triggerKind = invoked and 1 or 2 } -- Invoked or Automatic
    p.client_id = client.id
    p.request = lc.request(client, 'textDocument/inlineCompletion', params, function(err, result)
      on_result(buf, client, tick, row, col, err, result, index, invoked)
    end, buf)
  end
  if (delay or 0) <= 0 then
    fire()
  else
    p.timer = vim.defer_fn(function()
      p.timer = nil
      fire()
    end, delay)
  end
end

--- Apply a `llada/refine` to the shown suggestion; true when it was ours.
function M.on_refine(client, params)
  for buf, g in pairs(M.ghosts) do
    if g.client_id == client.id and g.cid == tostring(params.completionId)
      and vim.uri_from_bufnr(buf) == params.uri then
      if lc.candidate_index(g.item) ~= 0 then
        return true -- ours, but it refines the first candidate, not the one shown
      end
      local new = params.edits and text.apply_edits(g.full, params.edits, client.offset_encoding)
        or params.text
      if params.text and new ~= params.text then
        new = params.text -- the full text wins over edits that do not reproduce it
      end
      if new:sub(1, g.used) ~= g.full:sub(1, g.used) or #new <= g.used then
        M.clear(buf) -- the refinement changed what the user already typed
        return true
      end
      g.full = new
      draw(buf, g)
      return true
    end
  end
  return false
end

---@return {text: string, cid: string|nil, row: integer, col: integer, client_id: integer}|nil
function M.current(buf)
  local g = M.ghosts[buf]
  if not g then
    return nil
  end
  return { text = rest(g), cid = g.cid, row = g.row, col = g.col, client_id = g.client_id,
           item = g.item }
end

--- Insert all of the suggestion, or its next word or line. Returns false without one.
---@param kind 'all'|'word'|'line'
function M.accept(buf, kind)
  local g = M.ghosts[buf]
  if not g then
    return false
  end
  local r = rest(g)
  local e = draw_mod.edit(g.col, r, g.old or '')
  -- a partial accept takes part of an insertion; a replacement is accepted whole
  local piece = (e.old_mid == '' and e.at == g.col) and text.partial(e.new_mid, kind) or e.new_mid
  local end_row, end_col
  if piece == e.new_mid then
    end_row, end_col = draw_mod.apply(buf, g.row, g.col, r, g.old or '')
  else
    local lines = text.lines(piece)
    api.nvim_buf_set_text(buf, g.row, g.col, g.row, g.col, lines)
    end_row = g.row + #lines - 1
    end_col = (#lines == 1 and g.col or 0) + #lines[#lines]
    api.nvim_win_set_cursor(0, { end_row + 1, end_col })
  end
  local client = vim.lsp.get_client_by_id(g.client_id)
  if piece == e.new_mid then
    M.clear(buf)
    if client then
      lc.exec_cmd(client, g.item.command, buf)
    end
  else
    g.used, g.row, g.col = g.used + #piece, end_row, end_col
    draw(buf, g)
    if client then
      lc.notify(client, 'textDocument/didPartiallyAcceptCompletion',
        { item = g.item, acceptedLength = vim.fn.strchars(g.full:sub(1, g.used)) })
    end
  end
  return true
end

--- Show the next (`count` > 0) or previous candidate; with only one, ask the server for all
--- of them (an Invoked request); with none shown, ask for a suggestion (Invoked). Returns
--- false when there is nothing to cycle.
function M.cycle(buf, count)
  local g = M.ghosts[buf]
  if not g then
    M.request(buf, 0, true, 1)
    return lc.get(buf) ~= nil
  end
  if g.used > 0 then
    return false -- part of it already typed or accepted
  end
  local n = #g.items
  if n > 1 then
    local client = vim.lsp.get_client_by_id(g.client_id)
    if client then
      show(buf, client, g.row, g.col, g.items, (g.index - 1 + count) % n + 1)
    end
    return true
  end
  M.request(buf, 0, true, count > 0 and 2 or -1)
  return true
end

function M.dismiss(buf)
  cancel_pending(buf)
  M.clear(buf)
end

function M.attach(client, buf)
  local group = api.nvim_create_augroup('llada.ghost.' .. buf, { clear = true })
  api.nvim_create_autocmd({ 'InsertEnter', 'TextChangedI', 'TextChangedP' }, {
    group = group, buffer = buf,
    callback = function()
      if config.menu_open() then
        M.dismiss(buf)
        return
      end
      M.sync(buf)
      M.request(buf, config.options.debounce_ms)
    end,
  })
  -- the completion menu has the screen and the keys while it is open; then ask again
  api.nvim_create_autocmd('CompleteChanged', {
    group = group, buffer = buf,
    callback = function()
      if config.menu_open() then
        M.dismiss(buf)
      end
    end,
  })
  api.nvim_create_autocmd('CompleteDone', {
    group = group, buffer = buf,
    callback = function()
      if config.options.hide_during_completion then
        M.request(buf, config.options.debounce_ms)
      end
    end,
  })
  api.nvim_create_autocmd('CursorMovedI', {
    group = group, buffer = buf, callback = function() M.sync(buf) end,
  })
  api.nvim_create_autocmd({ 'InsertLeave', 'BufLeave' }, {
    group = group, buffer = buf, callback = function() M.dismiss(buf) end,
  })
  api.nvim_create_autocmd('LspDetach', {
    group = group, buffer = buf,
    callback = function(ev)
      if ev.data and ev.data.client_id == client.id then
        M.dismiss(buf)
        api.nvim_del_augroup_by_id(group)
      end
    end,
  })
end

return M
