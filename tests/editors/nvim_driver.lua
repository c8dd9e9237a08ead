-- Drives a Neovim under test (`nvim --embed --headless`) as a user would: msgpack-RPC from
-- this Neovim (`nvim -l nvim_driver.lua SPEC.json OUT.json`), keys through nvim_input, every
-- wait a poll with a timeout. Writes what it saw to OUT.json for the pytest side to assert on.
--
-- SPEC: {nvim, init, setup, file, ready_timeout, ghost_timeout, final_timeout,
--        candidates = [{line, keys}], partial = 'word'|'line'|nil, cycle = bool, menu = bool}
local spec = vim.json.decode(table.concat(vim.fn.readfile(arg[1]), '\n'), { luanil = { object = true } })
local result = { events = {} }
local d = dofile(vim.fn.fnamemodify(arg[0], ':p:h') .. '/nvim_drive.lua').start(spec, arg[2], result)
local rpc, lua, wait, finish = d.rpc, d.lua, d.wait, d.finish

local function note(ev)
  table.insert(result.events, ev)
end

-- The ghost text as drawn: every extmark with virtual text in the renderer's namespace.
local SNAPSHOT = [[
  local llada = require('llada')
  local buf = vim.api.nvim_get_current_buf()
  local cur = llada.current(buf)
  local marks = {}
  for name, ns in pairs(vim.api.nvim_get_namespaces()) do
    if name == 'llada.ghost' or name == 'nvim.lsp.inline_completion' then
      for _, m in ipairs(vim.api.nvim_buf_get_extmarks(buf, ns, 0, -1, { details = true })) do
        local d = m[4]
        if not d.virt_text or d.virt_text_pos == 'eol' then
          goto continue -- the struck-out text a suggestion replaces, the candidate counter
        end
        local lines = {}
        local first = {}
        for _, chunk in ipairs(d.virt_text or {}) do table.insert(first, chunk[1]) end
        table.insert(lines, table.concat(first))
        for _, vl in ipairs(d.virt_lines or {}) do
          local parts = {}
          for _, chunk in ipairs(vl) do table.insert(parts, chunk[1]) end
          table.insert(lines, table.concat(parts))
        end
        table.insert(marks, { ns = name, id = m[1], row = m[2], col = m[3],
                              text = table.concat(lines, '\n') })
        ::continue::
      end
    end
  end
  local pos = vim.api.nvim_win_get_cursor(0)
  return { current = cur and { text = cur.text, cid = cur.cid, row = cur.row, col = cur.col } or vim.NIL,
           marks = marks, refines = llada.refines, cursor = pos,
           line = cur and vim.api.nvim_buf_get_lines(buf, cur.row, cur.row + 1, false)[1] or vim.NIL,
           mode = vim.api.nvim_get_mode().mode, statusline = llada.statusline() }
]]

local function snapshot()
  return lua(SNAPSHOT)
end

local function buffer_lines()
  return rpc('nvim_buf_get_lines', 0, 0, -1, false)
end

--- The session's end: the status line and :checkhealth as they are now, then quit.
local function finish_session()
  result.stats_line = lua([[return require('llada').statusline()]])
  result.health = lua([[
    vim.cmd('silent checkhealth llada')
    return table.concat(vim.api.nvim_buf_get_lines(0, 0, -1, false), '\n')]])
  pcall(rpc, 'nvim_command', 'qall!')
  finish(nil)
end

-- Start: open the file, wait for the client and the model.
d.open('the model to load (llada/status ready)', function(st) return st.state == 'ready' end)
result.filetype = lua('return vim.bo.filetype')
result.renderer = lua([[return require('llada.config').renderer()]])
result.original = buffer_lines()

-- Try the candidates until one gets a suggestion: at each, enter insert mode with `keys`, then
-- type `type` one character at a time; after each key wait until a suggestion is drawn or
-- every request made since has been answered (a weak model often has nothing to say).
local function counters()
  return lua('return _G.llada_test')
end

local function settle(before)
  return wait('a suggestion or an empty answer', spec.ghost_timeout, function()
    -- counters first: an answer counted as handled is in the snapshot taken after it
    local c = counters()
    local s = snapshot()
    if s.current ~= vim.NIL and s.current.text ~= '' then
      if #s.marks > 0 then
        return s
      end
      return nil -- answered with a suggestion the editor has not drawn yet (next redraw)
    end
    if c.sent > before.sent and c.handled + c.cancelled >= c.sent then
      return 'empty'
    end
  end)
end

local shown
for _, cand in ipairs(spec.candidates) do
  rpc('nvim_win_set_cursor', 0, { cand.line, 0 })
  local keys = { cand.keys }
  for ch in (cand.type or ''):gmatch('.') do
    table.insert(keys, ch == '<' and '<lt>' or ch)
  end
  for _, k in ipairs(keys) do
    local before = counters()
    rpc('nvim_input', k)
    local got = settle(before)
    note({ candidate = cand, key = k, got = type(got) == 'table', counters = counters() })
    if type(got) == 'table' then
      shown = got
      break
    end
  end
  if shown then
    result.candidate = cand
    break
  end
  rpc('nvim_input', '<Esc>')
  wait('normal mode', 5, function() return rpc('nvim_get_mode').mode == 'n' end)
  rpc('nvim_command', 'silent edit!') -- back to the file as it is on disk
end
if not shown then
  finish('no suggestion at any candidate position')
end
result.first = shown
result.typed_lines = buffer_lines()

-- Wait for the final refinement of the shown completion, then look at the ghost text again.
local cid = shown.current.cid
local final = wait('the final llada/refine', spec.final_timeout, function()
  local s = snapshot()
  for _, r in ipairs(s.refines) do
    if r.completionId == cid and r.final then
      return s
    end
  end
end)
result.final = final
if not final then
  finish('no final refinement for completion ' .. tostring(cid))
end

-- Cycling (instead of the refine and accept checks): the next-candidate key asks the server
-- for every candidate (an Invoked request) and shows the second; previous goes back to the
-- first; next again is served from the answer already there.
if spec.cycle then
  local DEBUG_INFO = [[
    local c = vim.lsp.get_clients({ bufnr = 0, name = 'llada' })[1]
    local r = c:request_sync('llada/debugInfo', {}, 5000, 0)
    return r and r.result and r.result.counters or vim.NIL]]
  local function drawn_other_than(text)
    return function()
      local s = snapshot()
      if s.current ~= vim.NIL and s.current.text ~= text and #s.marks > 0 then
        return s
      end
    end
  end
  result.before_cycle = snapshot()
  local c0 = counters()
  rpc('nvim_input', '<M-]>')
  local answer = wait('the answer to the invoked request', spec.final_timeout, function()
    local c = counters()
    if c.handled > c0.handled then
      return c.answers[#c.answers]
    end
  end)
  if not answer then
    finish('no answer after the next-candidate key')
  end
  result.cycle_answer = answer
  result.server_counters = lua(DEBUG_INFO)
  if answer.n > 1 then
    result.after_next = wait('the second candidate', 10, drawn_other_than(answer.text))
    if not result.after_next then
      result.stuck = snapshot()
      finish('the next-candidate key did not show the second candidate')
    end
    rpc('nvim_input', '<M-[>')
    result.after_prev = wait('the first candidate again', 10, function()
      local s = snapshot()
      if s.current ~= vim.NIL and s.current.text == answer.text and #s.marks > 0 then
        return s
      end
    end)
    local c1 = counters()
    rpc('nvim_input', '<M-]>')
    result.after_next_again = wait('the second candidate again', 10, drawn_other_than(answer.text))
    result.requests_for_local_cycle = counters().sent - c1.sent
    -- dismissed, the same key asks for a suggestion (the server's cache has the candidates)
    rpc('nvim_input', '<C-]>')
    wait('the suggestion hidden', 10, function() return #snapshot().marks == 0 end)
    local c2 = counters()
    rpc('nvim_input', '<M-]>')
    result.ask_answer = wait('the answer to the asking key', spec.final_timeout, function()
      local c = counters()
      if c.handled > c2.handled then
        return c.answers[#c.answers]
      end
    end)
    result.after_ask = wait('a suggestion drawn', 10, function()
      local s = snapshot()
      if s.current ~= vim.NIL and #s.marks > 0 then
        return s
      end
    end)
  end
  pcall(rpc, 'nvim_command', 'qall!')
  finish(nil)
end

-- The completion menu (instead of the refine and accept checks): opening it hides the
-- suggestion, nothing is requested while it is open, <Tab> goes to the menu (here: Vim's own
-- <Tab>, which ends the completion) instead of accepting, and once the menu has closed a new
-- request goes out.
if spec.menu then
  local function menu_state()
    local s = snapshot()
    s.pum = lua('return vim.fn.pumvisible()')
    s.buffer_line = rpc('nvim_get_current_line')
    return s
  end
  result.before_menu = menu_state()
  rpc('nvim_input', '<C-r>=complete(col("."), ["zz_alpha", "zz_beta"]) ? "" : ""<CR>')
  result.menu_open = wait('the menu open and the suggestion hidden', 10, function()
    local s = menu_state()
    if s.pum == 1 and #s.marks == 0 and s.current == vim.NIL then
      return s
    end
  end)
  if not result.menu_open then
    result.stuck = menu_state()
    finish('the suggestion stayed with the completion menu open')
  end
  local c0 = counters()
  rpc('nvim_input', '<C-n>')
  result.item_selected = wait('the second menu item inserted', 10, function()
    local s = menu_state()
    if s.buffer_line:find('zz_beta', 1, true) and s.pum == 1 then
      return s
    end
  end)
  if not result.item_selected then
    finish('<C-n> did not select the next menu item')
  end
  result.requests_while_open = counters().sent - c0.sent
  rpc('nvim_input', '<Tab>')
  result.menu_closed = wait('the menu closed by <Tab>', 10, function()
    local s = menu_state()
    if s.pum == 0 and s.buffer_line ~= result.item_selected.buffer_line then
      return s
    end
  end)
  result.after_close = wait('a request after the menu closed, answered', spec.final_timeout, function()
    local c = counters()
    if c.sent > c0.sent and c.handled + c.cancelled >= c.sent then
      return c
    end
  end)
  pcall(rpc, 'nvim_command', 'qall!')
  finish(nil)
end

-- A refinement that changes the text (the live model rarely edits after the final draft, so
-- one is sent through the plugin's own handler): the ghost text must change in place.
if spec.inject_refine then
  local r = lua([[
    local cid = ...
    local llada = require('llada')
    local cur = llada.current(0)
    if not cur or cur.cid ~= cid then return vim.NIL end
    local client = vim.lsp.get_client_by_id(cur.client_id)
    local old = cur.text
    local params = { completionId = cid, uri = vim.uri_from_bufnr(0),
      version = vim.lsp.util.buf_versions[vim.api.nvim_get_current_buf()], step = 9999, final = true,
      edits = { { range = { start = { line = 0, character = 0 }, ['end'] = { line = 0, character = 0 } },
                  newText = 'zz' } },
      text = 'zz' .. old }
    llada.handlers['llada/refine'](nil, params, { client_id = client.id, method = 'llada/refine' })
    return params.text]], cid)
  result.injected_text = r
  result.after_inject = snapshot()
end

-- Optional partial accept, then the whole accept.
if spec.partial then
  local keys = spec.partial == 'word' and '<M-Right>' or '<M-Down>'
  local before = table.concat(buffer_lines(), '\n')
  local shown_text = snapshot().current.text
  local before_counts = counters()
  rpc('nvim_input', keys)
  result.after_partial = wait('the partial accept', 10, function()
    local now = table.concat(buffer_lines(), '\n')
    if now ~= before then
      local s = snapshot()
      s.lines = buffer_lines()
      return s
    end
  end)
  if not result.after_partial then
    finish('the partial accept changed nothing')
  end
  local lines = result.after_partial.lines
  result.partial_took_all = #table.concat(lines, '\n') - #before == #shown_text
  if result.partial_took_all then -- a one-word (or one-line) suggestion: nothing left
    result.accepted = lines
    result.after_accept = result.after_partial
    rpc('nvim_input', '<Esc>')
    finish_session()
  end
  -- The rest is shown again (locally, or by the server's answer for the new text).
  local got = settle(before_counts)
  note({ after_partial = type(got) == 'table', counters = counters(), shown = snapshot().current })
  if type(got) ~= 'table' then
    -- the server had nothing for the new text: accept what is left of the old suggestion
    -- is impossible now; the session ends with the partial accept checked
    result.rest_after_partial = vim.NIL
    pcall(rpc, 'nvim_command', 'qall!')
    finish(nil)
  end
  result.rest_after_partial = got
end
local pre_accept = snapshot()
result.pre_accept = pre_accept
result.pre_accept_lines = buffer_lines()
if pre_accept.current == vim.NIL then
  finish('the suggestion disappeared before the accept')
end
local before = table.concat(buffer_lines(), '\n')
rpc('nvim_input', '<Tab>')
result.accepted = wait('the accept', 10, function()
  local now = buffer_lines()
  if table.concat(now, '\n') ~= before then
    return now
  end
end)
result.after_accept = snapshot()
rpc('nvim_input', '<Esc>')
finish_session()
