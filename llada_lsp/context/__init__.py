"""Workspace context and the names in scope: what a prompt carries from the rest of the workspace."""
