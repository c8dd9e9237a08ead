"""Torch's CPU threads sized for the machine as it is (engine.model.threads): the CPUs and the
clock are parameters, so every decision here is driven by the step times the test gives, not
by the load of the machine the test runs on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine.model.threads import ThreadGovernor, cgroup_cpus, usable_cpus

ROOT = Path(__file__).resolve().parents[3]


class Machine:
    """A machine whose step time per thread count the test sets (`ms`): each `run` is steps
    of that many milliseconds at the governor's count in force."""

    def __init__(self, cpus: int, ms: dict[int, float]) -> None:
        self.ncpus, self.ms = cpus, ms
        self.now = 0.0
        self.applied: list[int] = []

    def governor(self, **kw: object) -> ThreadGovernor:
        return ThreadGovernor(apply=self.applied.append, cpus=lambda: self.ncpus, clock=lambda: self.now,
                              every=4, min_interval_s=0.0, probe_every=3, **kw)  # type: ignore[arg-type]

    def run(self, g: ThreadGovernor, steps: int) -> None:
        for _ in range(steps):
            self.now += self.ms[g.threads] / 1000
            g.step()


def test_it_starts_at_the_usable_cpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert Machine(4, {}).governor().start() == 4
    assert Machine(4, {}).governor(cap=3).start() == 3
    m = Machine(4, {})
    assert m.governor(fixed=1).start() == 1 and m.applied == [1]
    monkeypatch.setenv("OMP_NUM_THREADS", "2")  # the user's environment caps it
    assert Machine(4, {}).governor().start() == 2


def test_a_slower_count_is_probed_and_left(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    m = Machine(2, {1: 20.0, 2: 10.0})  # 2 threads twice as fast (a quiet machine)
    g = m.governor()
    g.start()
    m.run(g, 4)  # the first check probes one fewer
    assert g.threads == 1
    m.run(g, 4)  # one interval at 1: slower, back to 2
    assert g.threads == 2 and g.est == pytest.approx({2: 10.0, 1: 20.0})
    m.run(g, 48)  # 12 checks: a probe in every 3, each one interval long
    assert m.applied[0] == 2 and 3 <= m.applied.count(1) <= 5  # about one interval in every 3 checks
    assert g.threads == 2


def test_a_faster_count_takes_over_and_a_change_of_load_brings_the_other_back(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    m = Machine(2, {1: 10.0, 2: 30.0})  # spinning threads on a busy machine: 1 is faster
    g = m.governor()
    g.start()
    m.run(g, 8)
    assert g.threads == 1
    m.run(g, 24)
    assert g.threads == 1 or g.history[-1][1].startswith("probe")  # probes of 2 come back slower
    assert [why for n, why in g.history if n == 2][1:] and \
        all(why.startswith("probe") for n, why in list(g.history)[2:] if n == 2)
    m.ms = {1: 10.0, 2: 5.0}  # the load went away
    m.run(g, 24)
    assert g.threads == 2
    assert any("ms a step at 2 against" in why for _, why in g.history)


def test_a_difference_within_the_margin_changes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    m = Machine(2, {1: 10.0, 2: 9.5})
    g = m.governor()
    g.start()
    m.run(g, 48)
    assert not [why for _, why in g.history if "against" in why]  # probes only, never a take-over


def test_a_fixed_count_never_changes() -> None:
    m = Machine(2, {1: 1.0, 2: 100.0})
    g = m.governor(fixed=2)
    g.start()
    m.run(g, 40)
    assert g.threads == 2 and m.applied == [2]


def test_fewer_cpus_drop_the_counts_above_them(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    m = Machine(4, {1: 40.0, 2: 20.0, 3: 14.0, 4: 10.0})
    g = m.governor()
    g.start()
    m.run(g, 16)
    m.ncpus = 2  # the affinity mask shrank
    m.run(g, 16)
    assert g.threads <= 2 and max(g.est) <= 2


def test_idle_time_is_no_part_of_a_step(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    m = Machine(2, {1: 20.0, 2: 10.0})
    g = m.governor()
    g.start()
    m.run(g, 2)
    m.now += 10.0  # the loop waited for work
    g.idle()
    m.run(g, 4)
    assert g.est[2] == pytest.approx(10.0)



def test_a_step_cut_short_is_no_part_of_the_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    m = Machine(2, {1: 20.0, 2: 10.0})
    g = m.governor()
    g.start()
    m.run(g, 2)
    t = m.now
    m.now += 0.003  # a forward stopped between layers (engine.decoding.interrupt)
    g.skip(t)
    m.run(g, 2)
    assert g.est[2] == pytest.approx(10.0) and g.checks == 1


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
