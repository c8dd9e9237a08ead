"""Torch's CPU threads sized for the machine as it is, not as it was built.

On a machine the user shares with a build or a browser, every parallel op waits for all its
OpenMP threads: one descheduled thread stalls the whole step (on 2 busy cores, 2 threads ran
~2x slower than 1). So the step loop's owner keeps a `ThreadGovernor`:

* it starts from the CPUs the process may use (`usable_cpus`: the affinity mask, a cgroup v2
  `cpu.max` or v1 CFS quota) less the other work running now (`others_running`: the
  runnable tasks of /proc/loadavg, an instantaneous count, less this process's own);
* every `every` steps it checks again: the CPU time the process got against the wall time of
  those steps (`cpu_share`) shows a contended step directly (2 threads that got 1.2 CPUs'
  worth), the run queue shows room coming back; a change needs `votes` checks in a row that
  agree (hysteresis), so a short spike does not flip it;
* a fixed count (the `threads` option, the daemon's `--threads`) turns all of this off;
  `OMP_NUM_THREADS`, when set, is the most it chooses.

Its threads wait passively (`wait_passively`: `OMP_WAIT_POLICY=PASSIVE`, `KMP_BLOCKTIME=0`),
so that a thread between two ops sleeps instead of spinning against the user's build. OpenMP
reads these once, when torch loads it: `engine/__init__.py` sets them, before any module of
the engine can import torch (an environment the user set wins). Torch-free.
"""

from __future__ import annotations

import math
import os
import resource
import time
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


def others_running(loadavg: Path = Path("/proc/loadavg"), own: int = 1) -> int:
    """Runnable tasks on the machine now less `own` (this process's running ones); 0 where
    /proc/loadavg cannot be read."""
    try:
        running = int(loadavg.read_text().split()[3].partition("/")[0])
    except (OSError, ValueError, IndexError):
        return 0
    return max(0, running - own)


def cpu_seconds() -> float:
    """The CPU time of every thread of this process (user + system)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def env_cap() -> int | None:
    """`OMP_NUM_THREADS` when the user set it: the most threads the governor chooses."""
    try:
        n = int(os.environ.get("OMP_NUM_THREADS", "").split(",")[0])
    except ValueError:
        return None
    return n if n > 0 else None


def fit(cpus: int, others: float) -> int:
    """Threads for `cpus` CPUs with `others` runnable tasks beside ours: the CPUs left, >= 1."""
    return max(1, min(cpus, round(cpus - others)))


@dataclass
class ThreadGovernor:
    """Chooses and re-checks torch's intra-op threads for the loop's owner thread.

    `fixed`: a count that never changes (an option); `apply`: sets the count (default
    `torch.set_num_threads`, imported lazily), called only from the thread that runs the ops.
    The probes (`cpus`, `others`, `clock`, `cpu_clock`) are parameters so that tests drive
    every decision deterministically."""

    fixed: int | None = None
    cap: int | None = None  # at most this many (the daemon's bfloat16 rule: engine.daemon.cli)
    every: int = 16  # steps between checks
    min_interval_s: float = 0.5  # and at least this long
    votes: int = 2  # checks in a row that want the same new count
    contended_share: float = 0.7  # a step got less than this of its threads' CPU: contended
    apply: Callable[[int], None] | None = None
    cpus: Callable[[], int] = usable_cpus
    others: Callable[[int], int] = lambda own: others_running(own=own)
    clock: Callable[[], float] = time.perf_counter
    cpu_clock: Callable[[], float] = cpu_seconds
    threads: int = 0  # the count in force (0: not chosen yet)
    changes: int = 0
    _steps: int = 0
    _t0: float = 0.0
    _cpu0: float = 0.0
    _want: int = 0
    _agree: int = 0
    history: list[tuple[int, str]] = field(default_factory=list)  # (threads, why) of each change

    def start(self) -> int:
        """Choose the first count (on the loop's thread, before its first forward)."""
        n = self.fixed if self.fixed else fit(self._cpus(), self.others(1))
        self._set(n, "fixed" if self.fixed else "start")
        self._mark()
        return n

    def step(self) -> int:
        """After each step: every `every` steps (and `min_interval_s`) check again."""
        if not self.threads:
            self.start()
        if self.fixed:
            return self.threads
        self._steps += 1
        now = self.clock()
        if self._steps < self.every or now - self._t0 < self.min_interval_s:
            return self.threads
        share = (self.cpu_clock() - self._cpu0) / max(1e-9, now - self._t0) / self.threads
        want = self.decide(share)
        self._mark()
        if want == self.threads:
            self._want, self._agree = 0, 0
            return self.threads
        self._agree = self._agree + 1 if want == self._want else 1
        self._want = want
        if self._agree >= self.votes:
            self._set(want, f"cpu share {share:.2f}")
            self._want, self._agree = 0, 0
        return self.threads

    def decide(self, share: float) -> int:
        """The count the last interval asks for: fewer when the steps got too little CPU (or
        the run queue leaves fewer CPUs), more only when the run queue leaves room."""
        cpus = self._cpus()
        by_queue = fit(cpus, self.others(self.threads))
        if self.threads > 1 and share < self.contended_share:
            return min(by_queue, self.threads - 1)
        return min(by_queue, cpus)

    def _cpus(self) -> int:
        cap = self.cap or env_cap()
        return min(self.cpus(), cap) if cap else self.cpus()

    def idle(self) -> None:
        """The loop waited for work: the next interval starts afresh (idle time is no share)."""
        self._mark()

    def _mark(self) -> None:
        self._steps, self._t0, self._cpu0 = 0, self.clock(), self.cpu_clock()

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
