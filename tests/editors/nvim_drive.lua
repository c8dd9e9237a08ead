-- What the driver scripts (nvim_driver.lua, nvim_next_edit_driver.lua) share: a Neovim under
-- test (`nvim --embed --headless --clean -u SPEC.init`, the plugin configured from SPEC.setup)
-- driven over msgpack-RPC, polls with a timeout, and the result written to OUT.json.
--
--   local d = dofile(vim.fn.fnamemodify(arg[0], ':p:h') .. '/nvim_drive.lua').start(spec, out_path, result)
local M = {}

---@param spec table {nvim, init, setup, file, ...}
---@param out_path string
---@param result table what the driver saw (written as JSON by finish)
function M.start(spec, out_path, result)
  local d = { result = result }

  --- Write the result (with `err`, if any) and exit.
  function d.finish(err)
    result.error = err
    vim.fn.writefile({ vim.json.encode(result) }, out_path)
    os.exit(err and 1 or 0)
  end

  local chan = vim.fn.jobstart({ spec.nvim, '--embed', '--headless', '--clean', '-u', spec.init }, {
    rpc = true,
    env = { LLADA_TEST_SETUP = vim.json.encode(spec.setup) },
  })
  if chan <= 0 then
    d.finish('could not start ' .. spec.nvim)
  end

  function d.rpc(method, ...)
    return vim.rpcrequest(chan, method, ...)
  end

  function d.lua(code, ...)
    return d.rpc('nvim_exec_lua', code, { ... })
  end

  --- Poll `fn` every 20 ms until it returns a value other than nil or false: the value, else
  --- nil and why.
  function d.wait(what, timeout_s, fn)
    local value
    local ok = vim.wait(timeout_s * 1000, function()
      value = fn()
      return value ~= nil and value ~= false
    end, 20)
    if not ok then
      return nil, ('timed out after %ss waiting for %s'):format(timeout_s, what)
    end
    return value
  end

  --- `wait`, and finish with the reason when it times out.
  function d.must(what, timeout_s, fn)
    local value, err = d.wait(what, timeout_s, fn)
    if err then
      d.finish(err)
    end
    return value
  end

  --- Open spec.file and wait for the llada client, then until `ready(status)` holds for its
  --- llada/status ({state, next_edit}); an engine that failed to start ends the run.
  function d.open(ready_what, ready)
    d.rpc('nvim_command', 'edit ' .. vim.fn.fnameescape(spec.file))
    d.must('the llada client to attach', 30, function()
      return d.lua([[return #vim.lsp.get_clients({ bufnr = 0, name = 'llada' }) > 0]])
    end)
    return d.must(ready_what, spec.ready_timeout, function()
      local st = d.lua([[
        local c = vim.lsp.get_clients({ bufnr = 0, name = 'llada' })[1]
        local s = c and require('llada').status[c.id]
        return s and { state = s.state, next_edit = s.next_edit } or vim.NIL]])
      if st ~= vim.NIL and st.state == 'error' then
        d.finish('the engine failed to start')
      end
      return st ~= vim.NIL and ready(st) and st
    end)
  end

  return d
end

return M
