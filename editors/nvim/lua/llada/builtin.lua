--- Neovim 0.12's built-in inline completion (vim.lsp.inline_completion) as the renderer.
--- The built-in requests and draws the suggestion; this module updates the shown item in place
--- when `llada/refine` arrives and adds partial accepts and dismiss. The built-in keeps its
--- state private, so this reaches it through vim.lsp._capability (checked, never assumed):
--- without it, refinements still reach the buffer through the next request's answer.
local api = vim.api
local config = require('llada.config')
local draw = require('llada.draw')
local lc = require('llada.client')
local text = require('llada.text')

local M = {}

M.ns = api.nvim_create_namespace('nvim.lsp.inline_completion')

--- Where the item starts drawing, the text still to show, and the line's bytes after that
--- column its range replaces. The built-in skips what was typed since the item's start.
local function placement(buf, cur)
  local win = vim.fn.bufwinid(buf)
  local pos = api.nvim_win_get_cursor(win > 0 and win or 0)
  local crow, ccol = pos[1] - 1, pos[2]
  local row, col = crow, ccol
  if cur.range then
    row, col = cur.range.start.row, cur.range.start.col
  end
  local new, shift = cur.insert_text, 0
  if row == crow and ccol > col then
    local line = api.nvim_buf_get_lines(buf, row, row + 1, false)[1] or ''
    local typed = line:sub(col + 1, ccol)
    if new:sub(1, #typed) == typed then
      new, col, shift = new:sub(#typed + 1), ccol, #typed -- typed since: the range's end moved on
    end
  end
  local old = cur.range and draw.old_text(buf, row, col, cur.range.end_.row, cur.range.end_.col + shift) or ''
  return row, col, new, old
end

--- Draws the current item in place of the built-in's own drawing (an overlay over the rest
--- of the line for an item with a range, and a counter glued to the text): the new text
--- inline, what it replaces struck out, the counter apart at the end of the line.
local function show(self, hint)
  self:hide()
  local cur = self.current
  if not cur or type(cur.insert_text) ~= 'string' or not api.nvim_buf_is_valid(self.bufnr) then
    return
  end
  local row, col, new, old = placement(self.bufnr, cur)
  local n = self:count_items()
  -- the counter with several candidates, and "1/1" when cycling found no other
  local cycled = require('llada').cycled[lc.completion_id(cur) or '']
  local h = (hint or n > 1 or cycled) and ('llada %d/%d'):format(cur._index or 1, n) or nil
  draw.show(self.bufnr, M.ns, row, col, new, old, { hl = config.options.hl_group or 'LladaGhost', hl_old = 'LladaGhostReplaced',
    hl_counter = 'LladaGhostCounter', hint = h })
end

--- The built-in completor of `buf`, when its internals are as expected (its drawing replaced
--- by `show`).
---@return table|nil
local function completor(buf)
  local ok, cap = pcall(require, 'vim.lsp._capability')
  local class = ok and type(cap.all) == 'table' and cap.all.inline_completion or nil
  local c = class and class.active and class.active[buf]
  if c and type(c.show) == 'function' then
    if c.show ~= show and type(c.hide) == 'function' then
      c.show = show
    end
    return c
  end
  return nil
end

--- Whether refinements can update the shown item in place (the private API is there).
function M.can_refine()
  local ok, cap = pcall(require, 'vim.lsp._capability')
  return ok and type(cap.all) == 'table' and cap.all.inline_completion ~= nil
end

---@type table<integer, boolean> buffers whose inline completion waits for the menu to close
local paused = {}

--- The built-in would draw (and request) while the completion menu is open: it is turned
--- off for the buffer until the menu closes, then asked again.
local function pause(buf)
  if config.menu_open() and not paused[buf] then
    paused[buf] = true
    local c = completor(buf)
    if c and type(c.reset_timer) == 'function' then
      c:reset_timer() -- a debounced request must not draw over the menu
    end
    if c and type(c.abort) == 'function' then
      c:abort()
    end
    vim.lsp.inline_completion.enable(false, { bufnr = buf })
  end
end

local function resume(buf)
  if not paused[buf] then
    return
  end
  paused[buf] = nil
  vim.lsp.inline_completion.enable(true, { bufnr = buf })
  local c = completor(buf)
  if c and type(c.automatic_request) == 'function' and api.nvim_get_mode().mode:match('^i') then
    c:automatic_request()
  end
end

function M.attach(client, buf)
  vim.lsp.inline_completion.enable(true, { bufnr = buf })
  completor(buf)
  local group = api.nvim_create_augroup('llada.builtin.' .. buf, { clear = true })
  api.nvim_create_autocmd('CompleteChanged', {
    group = group, buffer = buf, callback = function() pause(buf) end,
  })
  api.nvim_create_autocmd({ 'CompleteDone', 'InsertLeave' }, {
    group = group, buffer = buf, callback = function() resume(buf) end,
  })
  api.nvim_create_autocmd('LspDetach', {
    group = group, buffer = buf,
    callback = function(ev)
      if ev.data and ev.data.client_id == client.id then
        paused[buf] = nil
        api.nvim_del_augroup_by_id(group)
      end
    end,
  })
end

local function current_item(buf)
  local c = completor(buf)
  local cur = c and c.current
  if not cur or type(cur.insert_text) ~= 'string' then
    return nil, c
  end
  return cur, c
end

---@return {text: string, cid: string|nil, row: integer, col: integer, client_id: integer}|nil
function M.current(buf)
  local cur = current_item(buf)
  if not cur then
    return nil
  end
  local row, col
  if cur.range then
    row, col = cur.range.start.row, cur.range.start.col
  else
    local pos = api.nvim_win_get_cursor(0)
    row, col = pos[1] - 1, pos[2]
  end
  return { text = cur.insert_text, cid = lc.completion_id(cur), row = row, col = col,
           client_id = cur.client_id, item = cur }
end

function M.on_refine(client, params)
  for buf in pairs(client.attached_buffers or {}) do
    local cur, c = current_item(buf)
    if cur and c and cur.client_id == client.id and lc.completion_id(cur) == tostring(params.completionId)
      and vim.uri_from_bufnr(buf) == params.uri then
      if lc.candidate_index(cur) ~= 0 then
        return true -- ours, but it refines the first candidate, not the one shown
      end
      local new = params.edits and text.apply_edits(cur.insert_text, params.edits, client.offset_encoding)
        or params.text
      if params.text and new ~= params.text then
        new = params.text
      end
      cur.insert_text = new
      local state = c.client_state and c.client_state[client.id]
      local items = state and state.items
      local it = items and items[cur._index]
      if it and lc.completion_id(it) == lc.completion_id(cur) then
        it.insertText = new -- so that cycling back to it shows the refined text
      end
      if api.nvim_buf_is_valid(buf) and api.nvim_get_mode().mode:match('^i') then
        c:show()
      end
      return true
    end
  end
  return false
end

--- Insert the whole item: its range replaced (what is drawn struck out), the cursor after
--- the new text (before the part of the line it keeps), then its command.
local function accept_whole(buf, item)
  local row, col, new, old = placement(buf, item)
  draw.apply(buf, row, col, new, old)
  local client = item.command and vim.lsp.get_client_by_id(item.client_id)
  if client then
    lc.exec_cmd(client, item.command, buf)
  end
end

---@param kind 'all'|'word'|'line'
function M.accept(buf, kind)
  local cur = current_item(buf)
  if not cur then
    return false
  end
  local _, col, new, old = placement(buf, cur)
  local e = draw.edit(col, new, old)
  local piece = (e.old_mid == '' and e.at == col) and text.partial(e.new_mid, kind) or e.new_mid
  if kind == 'all' or piece == e.new_mid then
    return vim.lsp.inline_completion.get({ bufnr = buf, on_accept = function(item)
      accept_whole(buf, item)
    end })
  end
  local typed = cur.insert_text:sub(1, #cur.insert_text - #new)
  return vim.lsp.inline_completion.get({
    bufnr = buf,
    on_accept = function(item)
      local pos = api.nvim_win_get_cursor(0)
      local row, c = pos[1] - 1, pos[2]
      local lines = text.lines(piece)
      api.nvim_buf_set_text(buf, row, c, row, c, lines)
      api.nvim_win_set_cursor(0, { row + #lines, (#lines == 1 and c or 0) + #lines[#lines] })
      local client = vim.lsp.get_client_by_id(item.client_id)
      if client then
        lc.notify(client, 'textDocument/didPartiallyAcceptCompletion',
          { item = { insertText = item.insert_text, command = item.command },
            acceptedLength = vim.fn.strchars(typed .. piece) })
      end
    end,
  })
end

--- Show the next (`count` > 0) or previous candidate. With only one, ask the server for all
--- of them (an Invoked request: the built-in only sends Automatic ones) and hand the answer
--- to the built-in's handler; with none shown, ask for a suggestion (Invoked). Returns false
--- when it cannot.
function M.cycle(buf, count)
  local cur, c = current_item(buf)
  if not c then
    return false
  end
  if not cur then
    if type(c.request) ~= 'function' then
      return false
    end
    c:request(vim.lsp.protocol.InlineCompletionTriggerKind.Invoked)
    return true
  end
  if type(c.count_items) == 'function' and c:count_items() > 1 then
    vim.lsp.inline_completion.select({ bufnr = buf, count = count })
    return true
  end
  local client = vim.lsp.get_client_by_id(cur.client_id)
  if not client or type(c.handler) ~= 'function' then
    return false
  end
  local tick, pos = api.nvim_buf_get_changedtick(buf), api.nvim_win_get_cursor(0)
  local params = vim.lsp.util.make_position_params(0, client.offset_encoding)
  params.context = { triggerKind = 1 } -- Invoked: every candidate that fits
  lc.request(client, 'textDocument/inlineCompletion', params, function(err, result)
    local now = api.nvim_win_get_cursor(0)
    if err or not result or not api.nvim_buf_is_valid(buf) or api.nvim_buf_get_changedtick(buf) ~= tick
      or now[1] ~= pos[1] or now[2] ~= pos[2] or completor(buf) ~= c then
      return -- stale: the user moved on
    end
    require('llada').note_cycled(result.items or result)
    c:handler(nil, result, { client_id = client.id })
    if c:count_items() > 1 then
      vim.lsp.inline_completion.select({ bufnr = buf, count = count })
    elseif type(c.show) == 'function' then
      c:show() -- one candidate: drawn again with "llada 1/1"
    end
  end, buf)
  return true
end

function M.dismiss(buf)
  local c = completor(buf)
  if c and type(c.abort) == 'function' then
    c:abort()
  end
end

return M
