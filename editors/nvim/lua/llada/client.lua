--- Small compatibility layer over vim.lsp.Client (method call style changed in 0.11).
local M = {}

M.NAME = 'llada'
local new_style = vim.fn.has('nvim-0.11') == 1

---@param bufnr integer
---@return vim.lsp.Client|nil
function M.get(bufnr)
  local clients = (vim.lsp.get_clients or vim.lsp.get_active_clients)({ bufnr = bufnr, name = M.NAME })
  return clients[1]
end

---@return integer|nil request id
function M.request(client, method, params, handler, bufnr)
  local ok, id
  if new_style then
    ok, id = client:request(method, params, handler, bufnr)
  else
    ok, id = client.request(method, params, handler, bufnr)
  end
  return ok and id or nil
end

function M.notify(client, method, params)
  if new_style then
    return client:notify(method, params)
  end
  return client.notify(method, params)
end

function M.cancel(client, id)
  if id == nil then
    return
  end
  if new_style then
    client:cancel_request(id)
  else
    client.cancel_request(id)
  end
end

--- Stop a pending debounce timer and cancel the request in flight (`p`: a buffer's pending
--- state {timer, request, client_id}, as ghost.lua and next_edit.lua keep it).
function M.stop_pending(p)
  if not p then
    return
  end
  if p.timer and not p.timer:is_closing() then
    p.timer:stop()
    p.timer:close()
  end
  p.timer = nil
  if p.request and p.client_id then
    local client = vim.lsp.get_client_by_id(p.client_id)
    if client then
      M.cancel(client, p.request)
    end
  end
  p.request = nil
end

--- Run an item's command (the server records accepts through it).
function M.exec_cmd(client, command, bufnr)
  if not command then
    return
  end
  if new_style then
    client:exec_cmd(command, { bufnr = bufnr })
  else
    M.request(client, 'workspace/executeCommand',
      { command = command.command, arguments = command.arguments }, nil, bufnr)
  end
end

--- The completion id the server put in an item's command (llada.acceptCompletion <id>).
---@return string|nil
function M.completion_id(item)
  local cmd = item and item.command
  local args = cmd and cmd.arguments
  return args and args[1] and tostring(args[1]) or nil
end

--- Which of the server's candidates an item is (the command's second argument; 0: the first
--- answer, the one `llada/refine` updates).
---@return integer
function M.candidate_index(item)
  local cmd = item and item.command
  local args = cmd and cmd.arguments
  return args and tonumber(args[2]) or 0
end

--- The insert text of an item as a plain string.
---@return string
function M.insert_text(item)
  local t = item.insertText or item.insert_text
  if type(t) == 'table' then
    return t.value or ''
  end
  return t or ''
end

return M
