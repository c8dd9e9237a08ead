"""The prompt: formats, tokenizers, the context window, token healing and the prompt cache."""
