"""llada-lsp: a language server that drafts code completions with a block-diffusion model.

Importing this package never imports torch: the model lives behind
`llada_lsp.engines.engine_client`, which loads the engine lazily in a worker thread.
"""

__version__ = "0.1.0"
