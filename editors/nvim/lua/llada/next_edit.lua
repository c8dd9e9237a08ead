--- Next-edit suggestions (docs/lsp.md "Next-edit suggestions"): after edits, with a debounce,
--- asks the server (`llada/nextEdit`) which other lines the model would now change, and shows
--- each suggestion as a diff in the buffer: the old text highlighted as removed
--- (LladaNextEditOld, linked to DiffDelete), the new text as virtual text after it
--- (LladaNextEditNew, linked to DiffAdd; a multi-line one as virtual lines below). The sites of
--- one edit (a rename's uses, the calls of a changed function) are one set: each is labelled
--- "k/N" with the edit's kind at the line's end (LladaNextEditInfo). `jump` moves the cursor to
--- the next site, `accept` applies the one on the cursor's line (else the next one),
--- `accept_all` applies the whole set, `dismiss` hides it. Any edit of the buffer and leaving the
--- buffer clear them; a newer answer replaces them.
---
--- A suggestion may carry a placeholder (`placeholder = {start, end}`: code units of `newText`,
--- `source = "placeholder"`; an added parameter's name at each call, for the user to replace):
--- its part of the new text is drawn in LladaNextEditPlaceholder, and accepting that one
--- suggestion leaves it selected in Select mode (as a snippet's placeholder: typing replaces it,
--- the unnamed register is kept). `accept_all` inserts every placeholder as plain text.
local api = vim.api
local config = require('llada.config')
local lc = require('llada.client')
local text = require('llada.text')

local M = {}

M.METHOD = 'llada/nextEdit'
M.ns = api.nvim_create_namespace('llada.next_edit')

---@type table<integer, boolean> client id -> the server can answer (llada/status nextEdit)
M.servers = {}

---@class llada.NextEdit
---@field row integer        0-based start row of the old text
---@field col integer        byte column
---@field end_row integer
---@field end_col integer
---@field new_text string
---@field old_text string
---@field range table        the LSP range (client encoding)
---@field confidence number
---@field placeholder {[1]: integer, [2]: integer}|nil bytes of new_text (0-based, end exclusive)

---@class llada.NextEdits
---@field client_id integer
---@field tick integer        b:changedtick the suggestions were drawn against
---@field items llada.NextEdit[]
---@field marks integer[]

---@type table<integer, llada.NextEdits>
M.shown = {}
---@type table<integer, table> the latest answer per buffer (for :checkhealth and tests)
M.last = {}
---@type table<integer, {timer: uv.uv_timer_t|nil, request: integer|nil, client_id: integer|nil}>
local pending = {}
---@type table<integer, {first: integer, last: integer}> 0-based lines changed since the last request
local edited = {}
---@type table<integer, boolean> buffers whose line changes are followed (nvim_buf_attach)
local following = {}

--- A change of lines [first, last_old) into [first, last_new): the range of changed lines grows
--- to cover it (and moves with lines added or removed above it).
local function note_lines(buf, first, last_old, last_new)
  local r = edited[buf]
  local a, b = first, math.max(first, last_new - 1)
  if r then
    local delta = last_new - last_old
    if r.first >= last_old then
      r.first, r.last = r.first + delta, r.last + delta
    elseif r.last >= last_old then
      r.last = r.last + delta
    end
    a, b = math.min(a, r.first), math.max(b, r.last)
  end
  edited[buf] = { first = math.max(0, a), last = math.max(0, b) }
end

local function opts()
  return config.options.next_edit or {}
end

--- Hide the suggestions of `buf`.
function M.clear(buf)
  M.shown[buf] = nil
  if api.nvim_buf_is_valid(buf) then
    api.nvim_buf_clear_namespace(buf, M.ns, 0, -1)
  end
end

local function stop(buf)
  lc.stop_pending(pending[buf])
end

--- Byte column of LSP position `pos` in `buf` (characters counted in `encoding`).
local function byte_col(buf, pos, encoding)
  local line = api.nvim_buf_get_lines(buf, pos.line, pos.line + 1, false)[1] or ''
  return text.offset(line, { line = 0, character = pos.character }, encoding)
end

--- A suggestion's placeholder as bytes of `new_text` ({start, end}), nil without a valid one.
local function placeholder_of(new_text, p, encoding)
  if type(p) ~= 'table' then
    return nil
  end
  local a = text.byte_index(new_text, p.start, encoding)
  local b = text.byte_index(new_text, p['end'], encoding)
  if not a or not b or b < a then
    return nil
  end
  return { a, b }
end

--- One suggestion from the server's answer, in buffer rows and byte columns.
local function item_of(buf, s, encoding)
  local r = s.range
  local new_text = s.newText or ''
  return {
    row = r.start.line, col = byte_col(buf, r.start, encoding),
    end_row = r['end'].line, end_col = byte_col(buf, r['end'], encoding),
    new_text = new_text, old_text = s.oldText or '', range = r,
    confidence = tonumber(s.confidence) or 0,
    placeholder = placeholder_of(new_text, s.placeholder, encoding),
  }
end

--- The lines of a suggestion's new text as virtual-text chunks: the placeholder's bytes in
--- `hl_ph`, the rest in `hl`.
local function chunk_lines(lines, ph, hl, hl_ph)
  local out, at = {}, 0 -- `at`: byte offset in new_text of the line's start
  for _, l in ipairs(lines) do
    local chunks = {}
    local a = ph and math.max(0, math.min(#l, ph[1] - at)) or #l
    local b = ph and math.max(0, math.min(#l, ph[2] - at)) or #l
    for _, part in ipairs({ { l:sub(1, a), hl }, { l:sub(a + 1, b), hl_ph }, { l:sub(b + 1), hl } }) do
      if part[1] ~= '' then
        table.insert(chunks, part)
      end
    end
    table.insert(out, #chunks > 0 and chunks or { { '', hl } })
    at = at + #l + 1
  end
  return out
end

--- Where text `s` inserted at (row, col) ends: its last row and the byte column after it.
local function advance(row, col, s)
  local lines = text.lines(s)
  if #lines == 1 then
    return row, col + #s
  end
  return row + #lines - 1, #lines[#lines]
end

--- Draw one suggestion (the `k`th of `n`, of an edit of `kind`); returns its extmark ids.
local function draw_item(buf, it, k, n, kind)
  local o = opts()
  local marks = {}
  local function mark(row, col, extmark)
    local ok, id = pcall(api.nvim_buf_set_extmark, buf, M.ns, row, col, extmark)
    if ok then
      table.insert(marks, id)
    end
  end
  local label = ('  next edit %d/%d%s'):format(k, n, kind ~= '' and (' · ' .. kind) or '')
  mark(it.row, 0, { virt_text = { { label, o.hl_info or 'LladaNextEditInfo' } }, virt_text_pos = 'eol',
                    hl_mode = 'combine', priority = 190 })
  if it.end_row > it.row or it.end_col > it.col then
    mark(it.row, it.col, { end_row = it.end_row, end_col = it.end_col, hl_group = o.hl_old,
                           hl_mode = 'combine', priority = 200 })
  end
  local lines = text.lines(it.new_text)
  if #lines > 1 and lines[#lines] == '' then
    table.remove(lines) -- a trailing line break: no empty virtual line for it
  end
  if #lines == 0 or (#lines == 1 and lines[1] == '') then
    return marks -- a deletion: the highlight says it
  end
  local virt = chunk_lines(lines, it.placeholder, o.hl_new, o.hl_placeholder or 'LladaNextEditPlaceholder')
  if #lines == 1 and it.end_row == it.row then
    mark(it.end_row, it.end_col, { virt_text = virt[1], virt_text_pos = 'inline', hl_mode = 'combine',
                                   priority = 200 })
  else
    local below = (it.end_col == 0 and it.end_row > it.row) and it.end_row - 1 or it.end_row
    mark(below, 0, { virt_lines = virt, priority = 200 })
  end
  return marks
end

--- Show the server's answer `res` from `client` in `buf` (when the buffer is still as it was at
--- b:changedtick `tick`, the one it was asked about).
function M.show(buf, client, res, tick)
  M.last[buf] = res
  if not api.nvim_buf_is_valid(buf) or vim.b[buf].changedtick ~= tick then
    return
  end
  M.clear(buf)
  local items = {}
  for _, s in ipairs(res.suggestions or {}) do
    table.insert(items, item_of(buf, s, client.offset_encoding or 'utf-16'))
  end
  if #items == 0 then
    return
  end
  local state = { client_id = client.id, tick = tick, items = items, marks = {}, kind = res.kind or '' }
  for k, it in ipairs(items) do
    vim.list_extend(state.marks, draw_item(buf, it, k, #items, state.kind))
  end
  M.shown[buf] = state
  pcall(api.nvim_exec_autocmds, 'User', { pattern = 'LladaNextEdit', modeline = false })
end

--- Ask the server now (the debounce has passed).
function M.request(buf)
  stop(buf)
  local client = lc.get(buf)
  if not client or not M.servers[client.id] or not api.nvim_buf_is_valid(buf) then
    return
  end
  local win = api.nvim_get_current_win()
  if api.nvim_win_get_buf(win) ~= buf then
    return
  end
  local params = vim.lsp.util.make_position_params(win, client.offset_encoding or 'utf-16')
  params.textDocument.version = vim.lsp.util.buf_versions[buf]
  local r = edited[buf] -- the lines changed since the last request (not the '[ '] marks: in
  edited[buf] = nil     -- Insert mode they still hold the last command's, e.g. :edit's whole file)
  if r then
    params.range = { start = { line = r.first, character = 0 }, ['end'] = { line = r.last, character = 0 } }
  end
  local tick = vim.b[buf].changedtick
  local p = pending[buf] or {}
  pending[buf] = p
  p.client_id = client.id
  p.request = lc.request(client, M.METHOD, params, function(err, res)
    if pending[buf] and pending[buf].request == p.request then
      pending[buf].request = nil
    end
    if err or type(res) ~= 'table' then
      M.last[buf] = { error = err and err.message or 'no result' }
      return
    end
    vim.schedule(function()
      M.show(buf, client, res, tick)
    end)
  end, buf)
end

--- An edit: hide what is shown, and ask again once the edits stop for `debounce_ms`.
function M.changed(buf)
  M.clear(buf)
  stop(buf)
  local o = opts()
  local client = lc.get(buf)
  if not o.enabled or not client or not M.servers[client.id] then
    return
  end
  local timer = vim.uv.new_timer()
  pending[buf] = pending[buf] or {}
  pending[buf].timer = timer
  timer:start(o.debounce_ms or 300, 0, vim.schedule_wrap(function()
    if pending[buf] and pending[buf].timer == timer then
      timer:close()
      pending[buf].timer = nil
      M.request(buf)
    end
  end))
end

--- The suggestions of `buf` from the cursor on: the one on the cursor's row (or after it) first.
local function ordered(buf)
  local s = M.shown[buf]
  if not s or vim.b[buf].changedtick ~= s.tick then
    return {}
  end
  local row = api.nvim_win_get_cursor(0)[1] - 1
  local after, before = {}, {}
  for _, it in ipairs(s.items) do
    table.insert((it.end_row >= row and it.row <= row or it.row > row) and after or before, it)
  end
  return vim.list_extend(after, before)
end

--- The suggestion `accept` would apply in the current window's buffer, or nil.
---@return llada.NextEdit|nil
function M.target(buf)
  return ordered(buf or api.nvim_get_current_buf())[1]
end

--- Whether suggestions are shown in `buf` (the keys act on them).
function M.active(buf)
  return #ordered(buf or api.nvim_get_current_buf()) > 0
end

--- Move the cursor to the next suggestion (after the cursor's row, wrapping). False without one.
function M.jump()
  local buf = api.nvim_get_current_buf()
  local row = api.nvim_win_get_cursor(0)[1] - 1
  for _, it in ipairs(ordered(buf)) do
    if it.row ~= row then
      api.nvim_win_set_cursor(0, { it.row + 1, it.col })
      return true
    end
  end
  local only = ordered(buf)[1]
  if only then
    api.nvim_win_set_cursor(0, { only.row + 1, only.col })
    return true
  end
  return false
end

--- Select the placeholder `ph` of `it` (just inserted) in Select mode, as vim.snippet selects
--- a tabstop: typing replaces it, and the black-hole register takes what it replaces. An
--- empty placeholder: Insert mode there.
local function select_placeholder(it, ph)
  local r1, c1 = advance(it.row, it.col, it.new_text:sub(1, ph[1]))
  local r2, c2 = advance(r1, c1, it.new_text:sub(ph[1] + 1, ph[2]))
  api.nvim_win_set_cursor(0, { r1 + 1, c1 })
  if ph[1] == ph[2] then
    vim.cmd.startinsert({ bang = c1 >= #api.nvim_get_current_line() })
    return
  end
  -- one key sequence, in order (the cursor moves by <Cmd>: API calls would run before the keys)
  local keys = ('<Cmd>call cursor(%d,%d)<CR>v<Cmd>call cursor(%d,%d)<CR>o<C-g>%s'):format(
    r1 + 1, c1 + 1, r2 + 1, c2, vim.fn.has('nvim-0.10') == 1 and '<C-r>_' or '')
  api.nvim_feedkeys(api.nvim_replace_termcodes(keys, true, false, true), 'n', true)
end

--- Apply the suggestion on the cursor's row (else the next one) and move there (a placeholder:
--- selected, see above); the others are cleared and asked for again (the edit triggers a new
--- request). False without one.
function M.accept()
  local buf = api.nvim_get_current_buf()
  local it = M.target(buf)
  local s = M.shown[buf]
  if not it or not s then
    return false
  end
  local client = vim.lsp.get_client_by_id(s.client_id)
  M.clear(buf)
  vim.lsp.util.apply_text_edits({ { range = it.range, newText = it.new_text } }, buf,
    client and client.offset_encoding or 'utf-16')
  if it.placeholder then
    select_placeholder(it, it.placeholder)
    return true
  end
  local row, col = advance(it.row, it.col, it.new_text)
  local count = api.nvim_buf_line_count(buf)
  row = math.min(row, count - 1)
  local len = #(api.nvim_buf_get_lines(buf, row, row + 1, false)[1] or '')
  api.nvim_win_set_cursor(0, { row + 1, math.max(0, math.min(col, len) - 1) })
  return true
end

--- Apply every suggestion of the set at once (one undo step; placeholders stay as plain text).
--- False without one.
function M.accept_all()
  local buf = api.nvim_get_current_buf()
  local s = M.shown[buf]
  if not s or vim.b[buf].changedtick ~= s.tick or #s.items == 0 then
    return false
  end
  local client = vim.lsp.get_client_by_id(s.client_id)
  local edits = {}
  for _, it in ipairs(s.items) do
    table.insert(edits, { range = it.range, newText = it.new_text })
  end
  M.clear(buf)
  vim.lsp.util.apply_text_edits(edits, buf, client and client.offset_encoding or 'utf-16')
  return true
end

--- Hide the suggestions of the current buffer (until the next edit).
function M.dismiss()
  local buf = api.nvim_get_current_buf()
  stop(buf)
  M.clear(buf)
end

--- Start following `buf`'s edits.
function M.attach(buf)
  if not following[buf] then
    following[buf] = true
    api.nvim_buf_attach(buf, false, {
      on_lines = function(_, b, _, first, last_old, last_new)
        if not following[b] then
          return true -- detach
        end
        note_lines(b, first, last_old, last_new)
      end,
      on_detach = function(_, b)
        following[b], edited[b] = nil, nil
      end,
    })
  end
  local group = api.nvim_create_augroup('llada.next_edit.' .. buf, { clear = true })
  api.nvim_create_autocmd({ 'TextChanged', 'TextChangedI' }, {
    group = group, buffer = buf,
    callback = function() M.changed(buf) end,
  })
  api.nvim_create_autocmd('BufLeave', { -- a buffer switch: what is shown would go stale unseen
    group = group, buffer = buf,
    callback = function()
      stop(buf)
      M.clear(buf)
    end,
  })
  api.nvim_create_autocmd('BufUnload', {
    group = group, buffer = buf,
    callback = function()
      stop(buf)
      pending[buf], M.shown[buf], M.last[buf], following[buf], edited[buf] = nil, nil, nil, nil, nil
    end,
  })
end

return M
