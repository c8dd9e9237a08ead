"""The resident daemon: websocket server, connections, wire protocol, runtime file and CLI.
Imports nothing here: the language server imports the torch-free `runtime` and `protocol`."""
