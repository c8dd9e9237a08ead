--- Pure text helpers: LSP edits against a suggestion, and partial accepts.
local M = {}

--- Byte offset of LSP position `pos` inside `text`, counting characters in `encoding`.
---@param text string
---@param pos {line: integer, character: integer}
---@param encoding string 'utf-8' | 'utf-16' | 'utf-32'
---@return integer 0-based byte offset
function M.offset(text, pos, encoding)
  local start = 1
  for _ = 1, pos.line do
    local nl = text:find('\n', start, true)
    if not nl then
      return #text
    end
    start = nl + 1
  end
  local stop = text:find('\n', start, true)
  local line = text:sub(start, stop and stop - 1 or #text)
  local col = pos.character
  if encoding ~= 'utf-8' then
    if vim.fn.has('nvim-0.11') == 1 then
      local ok, b = pcall(vim.str_byteindex, line, encoding, col, false)
      col = ok and b or #line
    else
      local ok, b = pcall(vim.str_byteindex, line, col, encoding == 'utf-16')
      col = ok and b or #line
    end
  end
  return start - 1 + math.min(col, #line)
end

--- Byte offset in `s` (the whole string, line breaks included) of its `units`th code unit
--- counted in `encoding`; nil when `units` is not a boundary inside `s`.
---@param s string
---@param units integer
---@param encoding string 'utf-8' | 'utf-16' | 'utf-32'
---@return integer|nil
function M.byte_index(s, units, encoding)
  if type(units) ~= 'number' or units < 0 or units % 1 ~= 0 then
    return nil
  end
  if encoding == 'utf-8' then
    return units <= #s and units or nil
  end
  local ok, b
  if vim.fn.has('nvim-0.11') == 1 then
    ok, b = pcall(vim.str_byteindex, s, encoding, units, true)
  else
    ok, b = pcall(vim.str_byteindex, s, units, encoding == 'utf-16')
  end
  return ok and b or nil
end

--- Apply LSP text edits (ranges against the original `text`, as in TextEdit[]).
---@param text string
---@param edits {range: {start: table, ['end']: table}, newText: string}[]
---@param encoding string
---@return string
function M.apply_edits(text, edits, encoding)
  local spans = {}
  for _, e in ipairs(edits or {}) do
    local s = M.offset(text, e.range.start, encoding)
    local f = M.offset(text, e.range['end'], encoding)
    table.insert(spans, { s, f, e.newText or '' })
  end
  table.sort(spans, function(a, b)
    return a[1] > b[1]
  end)
  for _, sp in ipairs(spans) do
    text = text:sub(1, sp[1]) .. sp[3] .. text:sub(sp[2] + 1)
  end
  return text
end

--- The part of `text` a partial accept takes: 'word', 'line' or 'all'.
---@param text string
---@param kind 'word'|'line'|'all'
---@return string
function M.partial(text, kind)
  if kind == 'all' or text == '' then
    return text
  end
  if kind == 'line' then
    local lead = text:match('^\n[ \t]*') or ''
    local rest = text:sub(#lead + 1)
    local line = rest:match('^[^\n]*')
    return lead .. line
  end
  -- word: leading blanks (a newline and its indentation included), then one word or one run
  -- of punctuation.
  local lead = text:match('^%s*')
  local rest = text:sub(#lead + 1)
  local word = rest:match('^[%w_]+') or rest:match('^[^%w_%s]+') or ''
  return lead .. word
end

--- Split text into lines (a trailing newline gives a last empty line).
---@param text string
---@return string[]
function M.lines(text)
  return vim.split(text, '\n', { plain = true })
end

return M
