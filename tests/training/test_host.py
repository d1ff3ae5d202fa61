"""The host model: cores shared by threads, CPU work as core-seconds over threads, and
the oversubscription law that must reproduce the calibration's `cpu` row by preemption, not by a rule."""

from __future__ import annotations

import math

import numpy as np
import pytest
import simpy

from wadiloco.models.engine.latency import load_calibration
from wadiloco.models.spec.load import scenario_from_dict
from wadiloco.models.spec.resolve import fleet_spec
from wadiloco.models.training.host import default_oversubscription, wait_sf
from wadiloco.models.training.interference import measured_ratio
from wadiloco.sim.fleet import simulate
from wadiloco.sim.host import HostCpu
from wadiloco.sim.probe import slowdown

EAGER = "decode_eager_b64_ctx1024"
SEEDS = 40  # 40 one-second windows near the measured context: ~5000 iterations, enough for a p99


@pytest.fixture(scope="module")
def cpu_row():
    return slowdown(EAGER, "cpu", seeds=SEEDS)


def test_cpu_row_median_and_tails_emerge_from_preemption(cpu_row):
    row = load_calibration()["interference"][EAGER]
    base, hit = row["baseline"], row["cpu"]
    assert cpu_row["p50_ratio"] == pytest.approx(measured_ratio(EAGER, "cpu", "p50_ratio"), rel=0.15)
    assert cpu_row["p95_ratio"] == pytest.approx(measured_ratio(EAGER, "cpu", "p95_ratio"), rel=0.15)
    # p99: 23.9 ms under load over 7.5 ms alone at p99 (3.17, the file's convention), or over the
    # alone median (3.47, the "3.5x"); the simulated baseline has no spread, so both apply.
    assert cpu_row["p99_ratio"] == pytest.approx(hit["p99_ms"] / base["p99_ms"], rel=0.15)
    assert cpu_row["p99_ratio"] == pytest.approx(hit["p99_ms"] / base["p50_ms"], rel=0.15)


@pytest.mark.parametrize("mode", ["decode_graph_b64_ctx1024", "prefill_graph_2048"])
def test_cpu_load_leaves_graph_steps_alone(mode):
    # A graph-replayed step has (almost) no CPU part: measured 0.98 and 1.00; only its host work is preempted.
    s = slowdown(mode, "cpu", seeds=3)
    for stat in ("p50_ratio", "p95_ratio"):
        assert s[stat] == pytest.approx(measured_ratio(mode, "cpu", stat), rel=0.15)


def test_unlimited_host_removes_the_preemptions():
    assert slowdown(EAGER, "cpu", seeds=3)["p99_ratio"] > 1.5
    s = slowdown(EAGER, "cpu", seeds=3, unlimited=("host",))
    assert s["p99_ratio"] == pytest.approx(1.0, abs=1e-9)


def test_law_predicts_the_rows_mean_and_fits_its_tails():
    law = default_oversubscription()
    row = load_calibration()["interference"][EAGER]
    h = row["baseline"]["p50_ms"] / 1e3
    mu = law.rate(17, 16) * h
    assert wait_sf((row["cpu"]["p95_ratio"] - 1) * h, mu, law.wait_s) == pytest.approx(0.05, rel=1e-6)
    # Held out: the mean step under load (7.94 ms against 6.89 alone); the law gives 1 + mu*tau/h.
    meas = row["cpu"]["mean_ms"] / row["baseline"]["mean_ms"]
    assert 1 + mu * law.wait_s / h == pytest.approx(meas, rel=0.05)
    assert law.rate(16, 16) == 0.0 and law.rate(32, 16) > law.rate(17, 16)


def _host(cores, engines=1, **fleet):
    sc = scenario_from_dict({"fleet": {"host_cores": cores, **fleet}})
    env = simpy.Environment()
    from wadiloco.sim.fabric import Fabric

    paths = [Fabric(env, f"p{k}").link("cpu", 1.0) for k in range(engines)]
    return env, HostCpu(env, "h", fleet_spec(sc), paths, engines, False, 0)


@pytest.mark.parametrize(
    "cores,threads,core_s,expected_s",
    [
        (None, 4, 8.0, 2.0),  # no core count: the work runs on its own threads
        (16, 4, 8.0, 2.0),  # enough cores: the same
        (4, 8, 8.0, 8.0 / (8 * 4 / 9)),  # 8 threads and the engine's on 4 cores: a fair 8/9 of them
        (4, 1, 8.0, 8.0),  # one thread never runs faster than one core
    ],
)
def test_cpu_work_is_core_seconds_over_threads(cores, threads, core_s, expected_s):
    env, cpu = _host(cores)
    job = cpu.work(core_s, threads)
    env.run(until=job.done)
    assert env.now == pytest.approx(expected_s, rel=1e-12)
    assert cpu.runnable == 1  # the engine's thread, once the work is done


def test_preemption_only_while_oversubscribed():
    env, cpu = _host(4, engines=2)
    env.run(until=10.0)
    assert cpu.preempters[0].count == 0  # 2 runnable threads on 4 cores
    load = cpu.work(math.inf, 3)
    env.run(until=20.0)
    n = cpu.preempters[0].count
    assert n > 0 and cpu.preempters[1].count > 0
    cpu.stop(load)
    env.run(until=30.0)
    assert cpu.preempters[0].count == n  # a wait in progress ran out; no new one began
    assert cpu.preempters[0].hold is None and cpu.runnable == 2
    expected = default_oversubscription().rate(5, 4) * 10.0
    assert n == pytest.approx(expected, rel=0.5)


def _fleet(unlimited=(), **fleet):
    return scenario_from_dict(
        {
            "name": "host",
            "horizon_s": 15,
            "drain_s": 15,
            "fleet": {"islands": 2, "hosts_per_island": 1, "unlimited": list(unlimited), **fleet},
            "engine": {"cuda_graphs": False},
            "merge": {"h_min": 32, "h_max": 64},
            "workload": {"kind": "normal", "load": 0.5},
            "policy": {"name": "fixed", "params": {"H": 48}},
        }
    )


def test_learner_threads_oversubscribe_a_small_host_and_unlimited_host_removes_it():
    # 8 learner threads + 1 engine thread: on 16 cores nothing changes, on 8 the engine is preempted.
    ref = simulate(_fleet(), 2, check=True)
    roomy = simulate(_fleet(host_cores=16), 2, check=True)
    np.testing.assert_array_equal(ref.requests["finish"], roomy.requests["finish"])
    tight = simulate(_fleet(host_cores=8), 2, check=True)
    assert np.nanmean(tight.requests["tpot"]) > np.nanmean(ref.requests["tpot"])
    free = simulate(_fleet(("host",), host_cores=8), 2, check=True)
    ref_free = simulate(_fleet(("host",)), 2, check=True)
    np.testing.assert_array_equal(free.requests["finish"], ref_free.requests["finish"])
    again = simulate(_fleet(host_cores=8), 2, check=True)
    np.testing.assert_array_equal(tight.requests["finish"], again.requests["finish"])  # deterministic


def test_checkpoint_serialisers_are_runnable_threads():
    # 8 learner threads + 1 engine = 9 on 10 cores: no preemption while training; at the barrier the
    # learners stop and 12 serialisers start: 13 runnable on 10 cores, preempted only while they run.
    sc = _fleet(host_cores=10).model_dump(mode="json", exclude={"base_dir", "source"})
    sc["merge"]["serialize_threads"] = 12
    sc.update(horizon_s=40)
    sc["policy"]["params"] = {"H": 32}  # a merge at 16 s
    from wadiloco.models.spec.resolve import resolve
    from wadiloco.sim.fleet import Fleet

    f = Fleet(resolve(scenario_from_dict(sc)), 2)
    cpu = f.res.hosts[0].cpu
    seen = []

    def watch():
        while f.env.now < 40:
            yield f.env.timeout(0.1)
            seen.append((f.env.now, cpu.runnable, f.merge.active))

    f.env.process(watch())
    f.env.run(until=40)
    assert max(r for _, r, _ in seen) == 13
    assert all(r == 9 for _, r, m in seen if not m)
    assert f.merge.host_work and cpu.preempters[0].count > 0
