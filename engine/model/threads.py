"""Torch's CPU threads sized for the machine as it is, not as it was built.

On a machine the user shares with a build or a browser, every parallel op waits for all its
OpenMP threads, and a thread that spins while it waits burns the share of the CPU the others
need (the issue-50 report: 2 spinning threads ran ~2x slower than 1 on 2 busy cores). Which
count is fastest depends on the load of the moment: with passive waiting, under a fair
scheduler, 2 threads on 2 cores at load 17 still ran ~2.5x faster than 1 (bench/busy.py,
BENCHMARKS.md). So the step loop's owner keeps a `ThreadGovernor` that measures instead of
guessing:

* it starts from the CPUs the process may use (`usable_cpus`: the affinity mask, capped by a
  cgroup v2 `cpu.max` or v1 CFS quota; `OMP_NUM_THREADS`, when set, is the most it uses);
* every `every` steps it notes the wall time a step took at the count in force, now and then
  runs one interval at a neighbouring count, and keeps the faster by a margin (hysteresis);
* a fixed count (the `threads` option, the daemon's `--threads`) turns all of this off.

Its threads wait passively (`wait_passively`: `OMP_WAIT_POLICY=PASSIVE`, `KMP_BLOCKTIME=0`),
so that a thread between two ops sleeps instead of spinning against the user's build. OpenMP
reads these once, when torch loads it: `engine/__init__.py` sets them, before any module of
the engine can import torch (an environment the user set wins). Torch-free.
"""

from __future__ import annotations

import math
import os
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

PASSIVE_ENV = {"OMP_WAIT_POLICY": "PASSIVE", "KMP_BLOCKTIME": "0"}
CGROUP = Path("/sys/fs/cgroup")


def wait_passively(env: dict[str, str] | os._Environ[str] = os.environ) -> None:
    """OpenMP threads sleep between parallel regions (unless the user chose otherwise)."""
    for key, value in PASSIVE_ENV.items():
        env.setdefault(key, value)


def cgroup_cpus(root: Path = CGROUP) -> float | None:
    """The CPUs a cgroup quota allows (v2 `cpu.max`, v1 `cpu.cfs_quota_us`); None: no quota."""
    try:
        v2 = root / "cpu.max"
        if v2.exists():
            quota, _, period = v2.read_text().strip().partition(" ")
            return None if quota == "max" else int(quota) / int(period or "100000")
        v1 = root / "cpu" / "cpu.cfs_quota_us"
        if v1.exists():
            quota_us = int(v1.read_text())
            period_us = int((root / "cpu" / "cpu.cfs_period_us").read_text())
            return None if quota_us <= 0 else quota_us / period_us
    except (OSError, ValueError):
        return None
    return None


def usable_cpus(root: Path = CGROUP) -> int:
    """The CPUs this process may run on: its affinity mask, capped by a cgroup quota."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    quota = cgroup_cpus(root)
    if quota is not None:
        cpus = min(cpus, max(1, math.ceil(quota - 0.05)))  # 1.5 CPUs' quota: 2 threads, not 1
    return max(1, cpus)


def env_cap() -> int | None:
    """`OMP_NUM_THREADS` when the user set it: the most threads the governor chooses."""
    try:
        n = int(os.environ.get("OMP_NUM_THREADS", "").split(",")[0])
    except ValueError:
        return None
    return n if n > 0 else None


@dataclass
class ThreadGovernor:
    """Chooses and re-checks torch's intra-op threads for the loop's owner thread.

    It starts at the CPUs the process may use and measures: every `every` steps (and at
    least `min_interval_s`) the interval's wall time a step goes into a moving average for
    the count in force; every `probe_every` checks it runs one interval at a neighbouring
    count (one fewer; one more where it is at 1), and it keeps whichever count's steps were
    faster, by `margin` at least (hysteresis). Idle time (the loop waiting for work) is no part
    of an interval. `fixed`: a count that never changes (an option); `apply`: sets the count
    (default `torch.set_num_threads`, imported lazily), called only from the thread that runs
    the ops. `cpus` and `clock` are parameters so that tests drive every decision."""

    fixed: int | None = None
    cap: int | None = None  # at most this many (the daemon's bfloat16 rule: engine.daemon.cli)
    every: int = 16  # steps between checks
    min_interval_s: float = 0.5  # and at least this long
    probe_every: int = 8  # checks between two probes of a neighbouring count
    margin: float = 0.1  # another count must be this much faster to take over
    apply: Callable[[int], None] | None = None
    cpus: Callable[[], int] = usable_cpus
    clock: Callable[[], float] = time.perf_counter
    threads: int = 0  # the count in force (0: not chosen yet)
    changes: int = 0
    checks: int = 0
    est: dict[int, float] = field(default_factory=dict)  # ms a step, a moving average per count
    seen: dict[int, int] = field(default_factory=dict)  # the check that last measured each count
    history: deque[tuple[int, str]] = field(default_factory=lambda: deque(maxlen=32))  # the last changes
    _steps: int = 0
    _t0: float = 0.0

    def start(self) -> int:
        """Choose the first count (on the loop's thread, before its first forward)."""
        n = self.fixed or self._cpus()
        self._set(n, "fixed" if self.fixed else "start: the usable CPUs")
        self._mark()
        return n

    def step(self) -> int:
        """After each step: every `every` steps (and `min_interval_s`) measure and decide."""
        if not self.threads:
            self.start()
        if self.fixed:
            return self.threads
        self._steps += 1
        now = self.clock()
        if self._steps < self.every or now - self._t0 < self.min_interval_s:
            return self.threads
        ms = (now - self._t0) * 1000 / self._steps
        self.checks += 1
        n = self.threads
        fresh = n not in self.est or self.checks - self.seen.get(n, 0) > 1  # a probe: its own sample
        self.est[n] = ms if fresh else 0.5 * self.est[n] + 0.5 * ms
        self.seen[n] = self.checks
        want, why = self.decide()
        self._set(want, why)
        self._mark()
        return self.threads

    def decide(self) -> tuple[int, str]:
        """The count for the next interval, and why."""
        cpus = self._cpus()
        for n in [n for n in self.est if n > cpus]:  # fewer CPUs now (affinity, quota)
            del self.est[n]
        cur = min(self.threads, cpus)
        alt = cur - 1 if cur > 1 else (cur + 1 if cur < cpus else 0)
        if alt and self.checks - self.seen.get(alt, -self.probe_every) >= self.probe_every:
            return alt, f"probe ({self.est.get(cur, 0):.1f} ms a step at {cur})"
        best = min(self.est, key=lambda n: self.est[n])
        if best != cur and self.est[best] < (1 - self.margin) * self.est.get(cur, math.inf):
            return best, f"{self.est[best]:.1f} ms a step at {best} against {self.est.get(cur, math.inf):.1f} at {cur}"
        return cur, "kept"

    def _cpus(self) -> int:
        cap = self.cap or env_cap()
        return min(self.cpus(), cap) if cap else self.cpus()

    def idle(self) -> None:
        """The loop waited for work: the next interval starts afresh."""
        self._mark()

    def skip(self, since: float) -> None:
        """A step that began at `since` (this governor's clock) was cut short (a forward stopped
        between layers, engine.decoding.interrupt): its time is no part of the interval."""
        self._t0 += max(0.0, self.clock() - since)

    def _mark(self) -> None:
        self._steps, self._t0 = 0, self.clock()

    def _set(self, n: int, why: str) -> None:
        if n == self.threads:
            return
        if self.threads:
            self.changes += 1
        self.threads = n
        self.history.append((n, why))
        (self.apply or _torch_set)(n)


def _torch_set(n: int) -> None:
    import torch  # lazy: this module is torch-free; the caller's thread already loaded it

    torch.set_num_threads(n)
