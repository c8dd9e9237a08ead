--- Neovim 0.12's built-in inline completion (vim.lsp.inline_completion) as the renderer.
--- The built-in requests and draws the suggestion; this module updates the shown item in place
--- when `llada/refine` arrives and adds partial accepts and dismiss. The built-in keeps its
--- state private, so this reaches it through vim.lsp._capability (checked, never assumed):
--- without it, refinements still reach the buffer through the next request's answer.
local api = vim.api
local config = require('llada.config')
local lc = require('llada.client')
local text = require('llada.text')

local M = {}

M.ns = api.nvim_create_namespace('nvim.lsp.inline_completion')

--- The built-in completor of `buf`, when its internals are as expected.
---@return table|nil
local function completor(buf)
  local ok, cap = pcall(require, 'vim.lsp._capability')
  local class = ok and type(cap.all) == 'table' and cap.all.inline_completion or nil
  local c = class and class.active and class.active[buf]
  if c and type(c.show) == 'function' then
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

--- Text between the item's start and the cursor, which the built-in does not redraw.
local function typed_since(buf, cur)
  if not cur.range then
    return ''
  end
  local pos = api.nvim_win_get_cursor(0)
  local row, col = pos[1] - 1, pos[2]
  local s = cur.range.start
  if s.row ~= row or s.col >= col then
    return ''
  end
  return api.nvim_buf_get_lines(buf, row, row + 1, false)[1]:sub(s.col + 1, col)
end

---@param kind 'all'|'word'|'line'
function M.accept(buf, kind)
  local cur = current_item(buf)
  if not cur then
    return false
  end
  if kind == 'all' then
    return vim.lsp.inline_completion.get({ bufnr = buf })
  end
  local typed = typed_since(buf, cur)
  local r = cur.insert_text
  if r:sub(1, #typed) == typed then
    r = r:sub(#typed + 1)
  end
  local piece = text.partial(r, kind)
  if piece == r then
    return vim.lsp.inline_completion.get({ bufnr = buf })
  end
  return vim.lsp.inline_completion.get({
    bufnr = buf,
    on_accept = function(item)
      local pos = api.nvim_win_get_cursor(0)
      local row, col = pos[1] - 1, pos[2]
      local lines = text.lines(piece)
      api.nvim_buf_set_text(buf, row, col, row, col, lines)
      api.nvim_win_set_cursor(0, { row + #lines, (#lines == 1 and col or 0) + #lines[#lines] })
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
    c:handler(nil, result, { client_id = client.id })
    if c:count_items() > 1 then
      vim.lsp.inline_completion.select({ bufnr = buf, count = count })
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
