--- Drawing a suggestion as ghost text: the new text inline before the rest of the line, and
--- the part of the line it replaces struck out. Used by both renderers (the extmark one and
--- the built-in's, whose own drawing is replaced: it draws an item with a range as an overlay,
--- which hides the rest of the line and shows less than accepting it gives).
---
--- A suggestion in the middle of a line replaces the rest of the line (the server's range runs
--- to the line's end, its text ends with the part of the rest it keeps): only what differs is
--- drawn. One line: the common start and end with the old text are left as they are. Several
--- lines: the whole rest of the line is struck out and the new lines (ending with the kept
--- rest) are drawn below.
local api = vim.api

local M = {}

--- (p, s): bytes the new and old text share at the start and at the end (p + s never longer
--- than either). `new` over several lines shares no end with the one-line `old`.
---@param new string
---@param old string
---@return integer, integer
function M.split(new, old)
  local multi = new:find('\n', 1, true) ~= nil
  local limit = math.min(#new, #old)
  local s = 0
  if not multi then
    while s < limit and new:byte(#new - s) == old:byte(#old - s) do
      s = s + 1
    end
  end
  local p = 0
  while p < limit - s and new:byte(p + 1) == old:byte(p + 1) and new:byte(p + 1) ~= 10 do
    p = p + 1
  end
  return p, s
end

--- The edit a suggestion makes at column `col`: replace `old_mid` (bytes of the line from
--- `at`) with `new_mid`. `old_mid == ''`: an insertion.
---@return {at: integer, new_mid: string, old_mid: string, kept: integer}
function M.edit(col, new, old)
  local p, s = M.split(new, old)
  return { at = col + p, new_mid = new:sub(p + 1, #new - s), old_mid = old:sub(p + 1, #old - s), kept = s }
end

---@class llada.DrawIds
---@field mark integer|nil  the inline ghost text (kept across redraws: updated in place)
---@field strike integer|nil the struck-out text it replaces
---@field counter integer|nil the "(n/N)" candidate counter

--- Draw `new` replacing `old` (the line's bytes after `col`) at (row, col) in `ns`, reusing
--- the ids of `ids`. `hint`: a candidate counter, drawn apart at the end of the line.
---@param ids llada.DrawIds|nil
---@return llada.DrawIds
function M.show(buf, ns, row, col, new, old, opts, ids)
  ids = ids or {}
  local e = M.edit(col, new, old)
  local lines = vim.split(e.new_mid, '\n', { plain = true })
  local virt_lines = {}
  for i = 2, #lines do
    table.insert(virt_lines, { { lines[i], opts.hl } })
  end
  local out = {}
  local ok, id = pcall(api.nvim_buf_set_extmark, buf, ns, row, e.at, {
    id = ids.mark, virt_text = { { lines[1], opts.hl } }, virt_text_pos = 'inline',
    virt_lines = #virt_lines > 0 and virt_lines or nil, hl_mode = 'combine', right_gravity = false,
  })
  out.mark = ok and id or nil
  if e.old_mid ~= '' then
    ok, id = pcall(api.nvim_buf_set_extmark, buf, ns, row, e.at, {
      id = ids.strike, end_row = row, end_col = e.at + #e.old_mid, hl_group = opts.hl_old,
    })
    out.strike = ok and id or nil
  elseif ids.strike then
    pcall(api.nvim_buf_del_extmark, buf, ns, ids.strike)
  end
  if opts.hint then
    ok, id = pcall(api.nvim_buf_set_extmark, buf, ns, row, 0, {
      id = ids.counter, virt_text = { { '  ', 'Normal' }, { opts.hint, opts.hl_counter } },
      virt_text_pos = 'eol', hl_mode = 'combine',
    })
    out.counter = ok and id or nil
  elseif ids.counter then
    pcall(api.nvim_buf_del_extmark, buf, ns, ids.counter)
  end
  return out
end

--- Delete the marks of `ids`.
function M.clear(buf, ns, ids)
  for _, id in pairs(ids or {}) do
    pcall(api.nvim_buf_del_extmark, buf, ns, id)
  end
end

--- Apply a suggestion: replace `old` after (row, col) with `new`; the cursor goes after the
--- new text (before the part of the line kept at its end).
function M.apply(buf, row, col, new, old)
  local e = M.edit(col, new, old)
  local lines = vim.split(e.new_mid, '\n', { plain = true })
  api.nvim_buf_set_text(buf, row, e.at, row, e.at + #e.old_mid, lines)
  local end_row = row + #lines - 1
  local end_col = (#lines == 1 and e.at or 0) + #lines[#lines]
  api.nvim_win_set_cursor(0, { end_row + 1, end_col })
  return end_row, end_col
end

--- The line's bytes after `col` that an item with LSP-converted range end (`end_row`,
--- `end_col`, byte columns) replaces; '' when the range ends before or on another line.
function M.old_text(buf, row, col, end_row, end_col)
  if end_row ~= row or end_col <= col then
    return ''
  end
  local line = api.nvim_buf_get_lines(buf, row, row + 1, false)[1] or ''
  return line:sub(col + 1, end_col)
end

return M
