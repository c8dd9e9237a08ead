"""The engine: model, decoding, prompts and the daemon. Importing the package makes torch's
OpenMP threads wait passively (engine.model.threads), before any of its modules imports torch."""

from engine.model.threads import wait_passively

wait_passively()
