-- Drives next-edit suggestions in a Neovim under test (`nvim --embed --headless`) as a user
-- would: an edit typed with nvim_input, then the jump and accept keys. Every wait is a poll with
-- a timeout. Writes what it saw to OUT.json (`nvim -l nvim_next_edit_driver.lua SPEC.json OUT.json`).
--
-- SPEC: {nvim, init, setup, file, ready_timeout, answer_timeout, line, keys}
local spec = vim.json.decode(table.concat(vim.fn.readfile(arg[1]), '\n'), { luanil = { object = true } })
local result = {}
local d = dofile(vim.fn.fnamemodify(arg[0], ':p:h') .. '/nvim_drive.lua').start(spec, arg[2], result)
local rpc, lua, wait, finish = d.rpc, d.lua, d.must, d.finish

-- The overlay as drawn: the extmarks of the next-edit namespace, the suggestions behind them.
local SNAPSHOT = [[
  local ne = require('llada.next_edit')
  local buf = vim.api.nvim_get_current_buf()
  local marks = {}
  for _, m in ipairs(vim.api.nvim_buf_get_extmarks(buf, ne.ns, 0, -1, { details = true })) do
    local d = m[4]
    local virt = {}
    for _, chunk in ipairs(d.virt_text or {}) do table.insert(virt, chunk[1]) end
    local vlines = {}
    for _, vl in ipairs(d.virt_lines or {}) do
      local parts = {}
      for _, chunk in ipairs(vl) do table.insert(parts, chunk[1]) end
      table.insert(vlines, table.concat(parts))
    end
    table.insert(marks, { row = m[2], col = m[3], end_row = d.end_row or vim.NIL, end_col = d.end_col or vim.NIL,
                          hl = d.hl_group or vim.NIL,
                          virt_hl = d.virt_text and d.virt_text[1] and d.virt_text[1][2] or
                            (d.virt_lines and d.virt_lines[1][1][2]) or vim.NIL,
                          virt_text = table.concat(virt), virt_lines = vlines })
  end
  local shown = ne.shown[buf]
  local items = {}
  for _, it in ipairs(shown and shown.items or {}) do
    table.insert(items, { row = it.row, col = it.col, end_row = it.end_row, end_col = it.end_col,
                          new_text = it.new_text, old_text = it.old_text, range = it.range })
  end
  local target = ne.target(buf)
  return { marks = marks, items = items, last = ne.last[buf] or vim.NIL,
           tick = vim.b[buf].changedtick, shown_tick = shown and shown.tick or vim.NIL,
           target = target and { row = target.row, col = target.col, range = target.range,
                                 new_text = target.new_text } or vim.NIL,
           lines = vim.api.nvim_buf_get_lines(buf, 0, -1, false),
           cursor = vim.api.nvim_win_get_cursor(0), mode = vim.api.nvim_get_mode().mode }
]]

local function snapshot()
  return lua(SNAPSHOT)
end

result.ready = d.open('the server to offer next edits (llada/status ready, nextEdit)', function(st)
  return st.state == 'ready' and st.next_edit
end)
result.original = rpc('nvim_buf_get_lines', 0, 0, -1, false)

-- The edit: the debounce passes, the request goes out, the overlay is drawn.
rpc('nvim_win_set_cursor', 0, { spec.line, 0 })
rpc('nvim_input', spec.keys)
wait('normal mode after the edit', 10, function() return rpc('nvim_get_mode').mode == 'n' end)
result.shown = wait('the next-edit overlay', spec.answer_timeout, function()
  local s = snapshot()
  if s.last ~= vim.NIL and s.last.error then
    finish('llada/nextEdit failed: ' .. s.last.error)
  end
  return #s.marks > 0 and s
end)

-- spec.switch: leave the buffer and come back: the set is cleared (it would go stale unseen);
-- asked for again, it is drawn again.
if spec.switch then
  rpc('nvim_command', 'enew')
  rpc('nvim_command', 'buffer #')
  result.switched = wait('the set cleared by the buffer switch', 10, function()
    local s = snapshot()
    return #s.marks == 0 and s.shown_tick == vim.NIL and s
  end)
  rpc('nvim_command', 'LladaNextEdit request')
  result.shown_again = wait('the set drawn again', spec.answer_timeout, function()
    local s = snapshot()
    return #s.marks > 0 and s
  end)
end

-- The jump key moves to a suggestion; the accept key applies the one there (spec.accept_key:
-- '<M-Y>' accepts the whole set, from wherever the cursor is).
rpc('nvim_win_set_cursor', 0, { spec.line, 0 })
if spec.accept_key == '<M-Y>' then
  result.jumped = snapshot()
else
  rpc('nvim_input', '<M-n>')
  result.jumped = wait('the jump', 10, function()
    local s = snapshot()
    return s.cursor[1] ~= spec.line and s
  end)
end
rpc('nvim_input', spec.accept_key or '<M-y>')
result.accepted = wait('the accept', 10, function()
  local s = snapshot()
  return s.tick ~= result.jumped.tick and s
end)
-- after the accept: nothing drawn against the old text (cleared, or asked for again and drawn anew)
result.refreshed = wait('the answer for the accepted text', spec.answer_timeout, function()
  local s = snapshot()
  return s.last ~= vim.NIL and s.last.version ~= result.shown.last.version and s
end)
rpc('nvim_input', ':LladaNextEdit dismiss<CR>')
result.dismissed = wait('the dismiss', 10, function()
  local s = snapshot()
  return #s.marks == 0 and s
end)
finish(nil)
