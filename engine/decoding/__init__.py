"""Decoding: the canvas and its steps, policies, stop rules, the loop guard, alternatives, the
batched forward and the one step loop (`scheduler`)."""
