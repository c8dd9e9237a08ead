"""Torch's CPU threads sized for the machine as it is (engine.model.threads): the probes are
parameters, so every decision here is driven by the numbers the test gives, not by the load of
the machine the test runs on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine.model.threads import ThreadGovernor, cgroup_cpus, fit, others_running, usable_cpus

ROOT = Path(__file__).resolve().parents[3]


class Probe:
    """A machine whose run queue and CPU time the test sets: each `tick` is one step of `dt`
    seconds in which the process got `share` of its threads' CPU."""

    def __init__(self, cpus: int = 2, others: int = 0) -> None:
        self.ncpus, self.nothers = cpus, others
        self.now = self.cpu = 0.0
        self.applied: list[int] = []

    def governor(self, **kw: object) -> ThreadGovernor:
        return ThreadGovernor(apply=self.applied.append, cpus=lambda: self.ncpus,
                              others=lambda own: self.nothers, clock=lambda: self.now,
                              cpu_clock=lambda: self.cpu, every=4, min_interval_s=0.1, **kw)  # type: ignore[arg-type]

    def run(self, g: ThreadGovernor, steps: int, share: float, dt: float = 0.05) -> None:
        for _ in range(steps):
            self.now += dt
            self.cpu += dt * share * g.threads
            g.step()


def test_fit_leaves_the_cpus_others_use() -> None:
    assert [fit(2, k) for k in (0, 1, 2, 4)] == [2, 1, 1, 1]
    assert fit(8, 3) == 5 and fit(1, 0) == 1


def test_the_first_count_is_the_free_cpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert Probe(4, 0).governor().start() == 4
    assert Probe(4, 3).governor().start() == 1
    assert Probe(4, 0).governor(cap=3).start() == 3
    p = Probe(4, 0)
    assert p.governor(fixed=1).start() == 1 and p.applied == [1]
    monkeypatch.setenv("OMP_NUM_THREADS", "2")  # the user's environment caps it
    assert Probe(4, 0).governor().start() == 2


def test_contended_steps_drop_a_thread_after_two_agreeing_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    p = Probe(2, 0)
    g = p.governor()
    g.start()
    assert g.threads == 2
    p.run(g, 4, share=0.5)  # one check says "fewer": not yet (hysteresis)
    assert g.threads == 2
    p.run(g, 4, share=0.5)
    assert g.threads == 1 and p.applied == [2, 1]
    assert "cpu share 0.50" in g.history[-1][1]


def test_a_spike_of_one_check_changes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    p = Probe(2, 0)
    g = p.governor()
    g.start()
    p.run(g, 4, share=0.4)
    p.run(g, 4, share=1.0)  # the next check disagrees: the vote starts over
    p.run(g, 4, share=0.4)
    assert g.threads == 2 and g.changes == 0


def test_threads_come_back_when_the_run_queue_empties(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    p = Probe(2, 1)
    g = p.governor()
    g.start()
    assert g.threads == 1
    p.run(g, 16, share=1.0)
    assert g.threads == 1  # a hog still runs: no room
    p.nothers = 0
    p.run(g, 8, share=1.0)
    assert g.threads == 2 and p.applied == [1, 2]


def test_a_fixed_count_never_changes() -> None:
    p = Probe(2, 0)
    g = p.governor(fixed=2)
    g.start()
    p.nothers = 3
    p.run(g, 40, share=0.2)
    assert g.threads == 2 and p.applied == [2]


def test_idle_time_is_no_part_of_the_share(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    p = Probe(2, 0)
    g = p.governor()
    g.start()
    p.now += 10.0  # the loop waited for work: no CPU used
    g.idle()
    p.run(g, 12, share=1.0)
    assert g.threads == 2


def test_cgroup_quotas_v2_and_v1(tmp_path: Path) -> None:
    (tmp_path / "cpu.max").write_text("150000 100000\n")
    assert cgroup_cpus(tmp_path) == 1.5
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert cgroup_cpus(tmp_path) is None
    v1 = tmp_path / "v1"
    (v1 / "cpu").mkdir(parents=True)
    (v1 / "cpu" / "cpu.cfs_quota_us").write_text("100000\n")
    (v1 / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert cgroup_cpus(v1) == 1.0
    assert usable_cpus(v1) == 1
    (v1 / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")
    assert cgroup_cpus(v1) is None
    assert cgroup_cpus(tmp_path / "absent") is None
    assert 1 <= usable_cpus(tmp_path / "absent") <= len(os.sched_getaffinity(0))


def test_run_queue_from_loadavg(tmp_path: Path) -> None:
    f = tmp_path / "loadavg"
    f.write_text("3.10 2.00 1.00 5/321 4242\n")
    assert others_running(f, own=1) == 4
    assert others_running(f, own=9) == 0
    assert others_running(tmp_path / "absent") == 0


def test_the_engine_package_makes_openmp_wait_passively_before_torch_loads() -> None:
    code = ("import os, json; import engine.api; import torch; "
            "print(json.dumps([os.environ.get('OMP_WAIT_POLICY'), os.environ.get('KMP_BLOCKTIME')]))")
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "KMP_BLOCKTIME")}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                         check=True).stdout
    assert json.loads(out.splitlines()[-1]) == ["PASSIVE", "0"]
    env["OMP_WAIT_POLICY"] = "ACTIVE"  # the user's own choice wins
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                         check=True).stdout
    assert json.loads(out.splitlines()[-1])[0] == "ACTIVE"
