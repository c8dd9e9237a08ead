"""The engine clients: the in-process engine, the daemon's websocket, SGLang over HTTP, and what each can do."""
