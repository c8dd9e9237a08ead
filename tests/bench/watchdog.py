"""The bench tests' watchdog. A test that runs a whole bench runs it at its smallest size and
asserts what it produced, never how fast: on a loaded machine (load 20-30 on 2 cores) a run
takes 10-20x its quiet time, so the test only guards against a hang, this generously. Every
test under tests/bench gets it as its pytest-timeout (tests/bench/conftest.py) unless it
names its own, and the subprocesses the benches run use it as their timeout."""

WATCHDOG_S = 3600
