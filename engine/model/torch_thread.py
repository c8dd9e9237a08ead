"""One thread for every torch op on the CPU.

torch's CPU parallelism is GNU OpenMP, which keeps one team of worker threads per thread that
starts parallel regions. Once a second thread of the process runs parallel ops there are two
teams, more OpenMP threads than cores on a small machine, and every parallel op pays: 1.35x
slower single-line completions on 2 cores (`python bench/omp_threads.py`, BENCHMARKS.md). The
daemon loads and decodes on its main thread, the language server's in-process engine on its
one worker thread. `FORWARDS.note` runs at every forward and logs one warning the first time
a CPU forward comes from a thread other than the first forward's, so that a change of layout
that brings the second team back shows in the log.
"""

from __future__ import annotations

import logging
import threading

log = logging.getLogger(__name__)


class ForwardThreads:
    def __init__(self) -> None:
        self.first: int | None = None
        self.warned = False
        self._lock = threading.Lock()

    def note(self, device_type: str, torch_threads: int) -> bool:
        """Record the calling thread; True (and one warning per process) when a CPU forward
        with more than one torch thread comes from a thread other than the first one's."""
        me = threading.get_ident()
        if self.first == me:
            return False
        with self._lock:
            if self.first is None:
                self.first = me
                return False
            if device_type != "cpu" or torch_threads < 2:
                return False
            if not self.warned:
                self.warned = True
                log.warning("torch forwards from a second thread (%s): with %d CPU threads each thread "
                            "that runs torch ops gets its own OpenMP team and parallel ops slow down "
                            "(~1.35x on 2 cores); run every torch op on one thread (bench/omp_threads.py)",
                            threading.current_thread().name, torch_threads)
            return True


FORWARDS = ForwardThreads()
