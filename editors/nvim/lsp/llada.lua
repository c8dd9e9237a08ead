-- The llada-lsp server for vim.lsp.config / vim.lsp.enable('llada') (Neovim 0.11+).
-- require('llada').setup() enables it; without setup() the defaults of llada.config apply.
return require('llada.lsp_config').get()
