"""Next-edit suggestions: the edit analysis and the follow-up sites."""
