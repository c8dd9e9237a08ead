"""The protocol: the LSP handlers, stdio, framing, the lifecycle, options and limits."""
