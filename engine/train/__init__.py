"""Training recipe of the embedded default model (tokenizer, data, block-diffusion objective)."""
