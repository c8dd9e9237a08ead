--- Options of the llada plugin (require('llada').setup(opts) merges over these).
local M = {}

---@class llada.Keymaps
---@field accept string|false      accept the whole suggestion (falls back to the key itself)
---@field accept_word string|false accept the next word
---@field accept_line string|false accept the next line
---@field dismiss string|false     hide the suggestion
---@field next string|false        show the next candidate (asks the server for them if needed)
---@field prev string|false        show the previous candidate

---@class llada.NextEditKeymaps (normal mode; each falls back to the key itself without suggestions)
---@field jump string|false   move to the next suggestion
---@field accept string|false apply the suggestion on the cursor's line (else the next one)
---@field accept_all string|false apply every suggestion of the set
---@field dismiss string|false hide the suggestions

---@class llada.NextEditConfig
---@field enabled boolean       send llada/nextEdit after edits (when the server says it can answer)
---@field hl_info string|nil    the "next edit k/N" label of each site (linked to Comment)
---@field debounce_ms integer   wait this long after the last edit
---@field hl_old string         the text a suggestion replaces (linked to DiffDelete)
---@field hl_new string         the suggested text (linked to DiffAdd)
---@field hl_placeholder string|nil a placeholder in it, to type over (linked to SnippetTabstop)
---@field keymaps llada.NextEditKeymaps|false

---@class llada.Config
---@field cmd string[]|nil          server command; default { server_path }
---@field server_path string|nil    the `llada-lsp` executable; nil: $LLADA_LSP, else on $PATH,
---                                  else the .venv of the checkout this plugin is in
---@field cmd_env table<string,string>|nil extra environment for the server
---@field filetypes string[]|nil    nil: every filetype
---@field server table              initializationOptions (docs/lsp.md): mode, engine, exclude
---                                  (gitignore patterns never sent as context), ...
---@field renderer 'auto'|'builtin'|'extmark' 'auto': Neovim 0.12's vim.lsp.inline_completion
---                                  when present, else the plugin's own extmarks
---@field debounce_ms integer       extmark renderer: delay before a request while typing
---@field keymaps llada.Keymaps|false
---@field hl_group string           highlight of the ghost text (extmark renderer)
---@field hide_during_completion boolean while the completion menu is open, no suggestion is
---                                  shown or requested and the keymaps are the menu's; it
---                                  comes back when the menu closes
---@field enable boolean            setup() calls vim.lsp.enable('llada')
---@field next_edit llada.NextEditConfig next-edit suggestions (README: "Next-edit suggestions")
M.defaults = {
  cmd = nil,
  server_path = nil, -- found by M.find_server()
  cmd_env = nil,
  filetypes = nil,
  server = { mode = 'speedy', engine = 'inprocess', languages = { '*' } },
  renderer = 'auto',
  debounce_ms = 60,
  keymaps = {
    accept = '<Tab>',
    accept_word = '<M-Right>',
    accept_line = '<M-Down>',
    dismiss = '<C-]>',
    next = '<M-]>',
    prev = '<M-[>',
  },
  hl_group = 'LladaGhost',
  hide_during_completion = true,
  enable = true,
  next_edit = {
    enabled = true,
    debounce_ms = 300,
    hl_old = 'LladaNextEditOld',
    hl_new = 'LladaNextEditNew',
    hl_placeholder = 'LladaNextEditPlaceholder',
    keymaps = { jump = '<M-n>', accept = '<M-y>', accept_all = '<M-Y>', dismiss = '<M-x>' },
  },
}

---@type llada.Config
M.options = vim.deepcopy(M.defaults)

---@param opts table|nil
---@return llada.Config
function M.set(opts)
  assert(opts == nil or type(opts) == 'table', 'llada: setup() takes a table')
  M.options = vim.tbl_deep_extend('force', vim.deepcopy(M.defaults), opts or {})
  local r = M.options.renderer
  if r ~= 'auto' and r ~= 'builtin' and r ~= 'extmark' then
    error(("llada: renderer must be 'auto', 'builtin' or 'extmark', got %s"):format(vim.inspect(r)))
  end
  return M.options
end

--- Whether this Neovim has the built-in inline completion (0.12).
---@return boolean
function M.has_builtin()
  return (pcall(require, 'vim.lsp.inline_completion'))
end

--- The renderer in use: 'builtin' needs vim.lsp.inline_completion (Neovim 0.12).
---@return 'builtin'|'extmark'
function M.renderer()
  local r = M.options.renderer
  local has_builtin = M.has_builtin()
  if r == 'builtin' and not has_builtin then
    return 'extmark'
  end
  if r == 'auto' then
    return has_builtin and 'builtin' or 'extmark'
  end
  return r --[[@as 'builtin'|'extmark']]
end

--- The completion menu is open and suggestions give way to it (`hide_during_completion`).
---@return boolean
function M.menu_open()
  return M.options.hide_during_completion and vim.fn.pumvisible() == 1
end

--- The checkout this plugin lives in (editors/nvim/lua/llada/config.lua is 5 levels down).
---@return string
function M.checkout()
  local src = debug.getinfo(1, 'S').source:sub(2)
  return vim.fn.fnamemodify(vim.fn.resolve(src), ':p:h:h:h:h:h') -- a plugin manager's symlink followed
end

--- The `llada-lsp` executable: $LLADA_LSP, else `llada-lsp` on $PATH, else the `.venv` of the
--- checkout this plugin lives in (where `./dev demo` installs it). Returns (path, where), or
--- (nil, what was tried).
---@return string|nil, string
function M.find_server()
  local env = vim.env.LLADA_LSP
  if env and env ~= '' then
    return env, '$LLADA_LSP'
  end
  local on_path = vim.fn.exepath('llada-lsp')
  if on_path ~= '' then
    return on_path, 'PATH'
  end
  local venv = M.checkout() .. '/.venv/bin/llada-lsp'
  if vim.fn.executable(venv) == 1 then
    return venv, 'the checkout\'s .venv'
  end
  return nil, '$LLADA_LSP is unset, llada-lsp is not on PATH, and ' .. venv .. ' does not exist'
end

--- The server command.
---@return string[]
function M.cmd()
  if M.options.cmd then
    return M.options.cmd
  end
  return { M.options.server_path or M.find_server() or 'llada-lsp' }
end

--- Why the server command cannot start (not found, not executable), or nil.
---@return string|nil
function M.cmd_problem()
  local exe = M.cmd()[1]
  if vim.fn.executable(exe) == 1 then
    return nil
  end
  if not M.options.cmd and not M.options.server_path then
    local _, tried = M.find_server()
    return 'llada-lsp not found: ' .. tried .. ' (run ./dev demo, or set server_path)'
  end
  return 'cannot run ' .. exe .. ': not an executable (server_path / cmd in setup())'
end

return M
