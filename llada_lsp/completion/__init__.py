"""A completion's pipeline: plan, caches, engine events, cleaning, answer and refinements."""
