"""fleet.gpu_sharing: training's own GPU work on a shared GPU. The sign of the merge
effect must emerge from the holds (the barrier frees the GPU), and an unlimited GPU must remove it."""

from __future__ import annotations

import numpy as np
import pytest

from wadiloco.models.spec.load import scenario_from_dict, with_overrides
from wadiloco.models.spec.resolve import resolve
from wadiloco.models.training.interference import default_weights
from wadiloco.sim.fabric import Fabric
from wadiloco.sim.fleet import Fleet, simulate


def _sc(mode="timeslice", unlimited=(), colocation="same_gpu", load=0.3, interference=None, **fleet):
    return scenario_from_dict(
        {
            "interference": interference or {},
            "name": "gpushare",
            "horizon_s": 150,
            "drain_s": 60,
            "fleet": {
                "islands": 2,
                "hosts_per_island": 1,
                "colocation": colocation,
                "gpu_sharing": mode,
                "unlimited": list(unlimited),
                **fleet,
            },
            "merge": {"h_min": 32, "h_max": 64},
            "workload": {"kind": "normal", "load": load},
            "policy": {"name": "fixed", "params": {"H": 48}},
        }
    )


W = default_weights()


@pytest.mark.parametrize(
    "mode,colocation,extra,share",
    [
        ("merges", "same_gpu", {}, 1.0),  # today's: inner steps never touch the GPU
        ("timeslice", "same_gpu", {}, 1 / (1 + W.gpu_outer)),  # the `outer` row's saturating co-tenant
        ("timeslice", "same_host", {}, 1.0),  # training keeps to its own GPU
        ("mps", "same_gpu", {"mps_training_share": 0.2}, 0.8),  # capped at 20%, serving keeps the rest
        ("mps", "same_gpu", {"mps_training_share": 0.9}, 1 / (1 + W.gpu_outer)),  # the cap does not bind
        ("mig", "same_gpu", {}, 1.0),  # a slice of its own
    ],
)
def test_serving_share_of_its_gpu_while_islands_step(mode, colocation, extra, share):
    f = Fleet(resolve(_sc(mode, colocation=colocation, **extra)), 1)
    f.env.run(until=5.0)  # islands are stepping, no merge yet (H = 48 steps of 0.5 s)
    assert not f.merge.active
    assert Fabric.hold_share(f.sidecars[0].gpu) == pytest.approx(share, rel=1e-12)


def test_inner_weight_from_the_scenario():
    f = Fleet(resolve(_sc(interference={"gpu_inner_weight": 0.55})), 1)
    f.env.run(until=5.0)
    assert Fabric.hold_share(f.sidecars[0].gpu) == pytest.approx(1 / 1.55)


def _overlap_tpot(res):
    r = res.requests
    on = r["merge"] >= 0
    return np.nanmean(r["tpot"][on]), np.nanmean(r["tpot"][~on])


def test_barrier_frees_a_shared_gpu_so_serving_is_faster_during_merges():
    # With inner steps on the serving GPU, requests that overlap a merge decode faster than the rest...
    merged = simulate(_sc(), 3, check=True)
    assert merged.summary["merges"] >= 3
    during, between = _overlap_tpot(merged)
    assert during < 0.8 * between
    # ...the opposite of today's model, where only merge work reaches the GPU.
    during0, between0 = _overlap_tpot(simulate(_sc("merges"), 3, check=True))
    assert during0 > between0
    # And training all the time costs serving more than training with merges (negative sync-excess).
    alone = simulate(_sc(), 3, "no_sync", {}, check=True)
    assert np.nanmean(merged.requests["e2e"]) < np.nanmean(alone.requests["e2e"])


def test_unlimited_gpu_and_copy_path_remove_all_of_it():
    # Everything gpu_sharing adds goes through the GPU and PCIe: unlimited, the run is today's, exactly.
    a = simulate(_sc("timeslice", ("gpu", "pcie")), 3, check=True)
    b = simulate(_sc("merges", ("gpu", "pcie")), 3, check=True)
    assert [m.end for m in a.merges] == [m.end for m in b.merges]
    for col in ("first_token", "finish"):
        np.testing.assert_array_equal(a.requests[col], b.requests[col])


def test_checkpoint_staging_crosses_pcie_before_the_write():
    # 1e9 params, 1 host per island: an 8 GB = 64 Gb checkpoint shard, 440 Gb/s PCIe, 5.6 Gb/s serialisation.
    ph = simulate(_sc("timeslice"), 1).summary["merge_phase_mean_s"]
    assert ph["ckpt"] == pytest.approx(64 / 440 + 64 / 5.6, rel=1e-9)
    assert simulate(_sc("merges"), 1).summary["merge_phase_mean_s"]["ckpt"] == pytest.approx(64 / 5.6, rel=1e-9)


def test_allreduce_kernels_hold_the_shared_gpu_while_flows_run():
    f = Fleet(resolve(_sc("timeslice")), 1)
    seen = []

    def watch():
        while f.env.now < 60:
            yield f.env.timeout(0.05)
            if f.merge.active and any(j.tag == ("hold", "allreduce") for j in f.sidecars[0].gpu.jobs):
                seen.append(f.env.now)

    f.env.process(watch())
    f.env.run(until=60)
    rec = f.trainer.merges[0]
    a, b = rec.phases["allreduce"]
    assert seen and all(a <= t <= b for t in seen)
    assert not any(j.tag == ("hold", "allreduce") for j in f.sidecars[0].gpu.jobs)


@pytest.mark.parametrize(
    "fleet",
    [
        {"gpu_sharing": "timeslice"},
        {"gpu_sharing": "mps", "mps_training_share": 0.3},
        {"gpu_sharing": "timeslice", "host_cores": 8},  # learner threads oversubscribe: preemptions too
    ],
    ids=["timeslice", "mps", "timeslice-preempted"],
)
def test_lookahead_stays_bit_identical(fleet):
    # Holds switch at barriers, resumes and the horizon stop, preemptions at drawn instants: all are
    # lookahead sources, so engines that run ahead of the clock compute exactly what they compute on it.
    d = _sc().model_dump(mode="json", exclude={"base_dir", "source"})
    d["fleet"].update(fleet)
    d.update(horizon_s=40, drain_s=15)
    d["merge"].update(h_min=16, h_max=32)
    d["policy"]["params"] = {"H": 24}  # merges from 12 s on, every ~25 s
    d["engine"]["cuda_graphs"] = False
    sc = scenario_from_dict(d)
    on = Fleet(resolve(sc), 2, lookahead=True).run()
    off = Fleet(resolve(sc), 2, lookahead=False).run()
    assert on.summary["merges"] >= 2
    for k in off.requests:
        np.testing.assert_array_equal(on.requests[k], off.requests[k], err_msg=k)
    assert [(m.start, m.end) for m in on.merges] == [(m.start, m.end) for m in off.merges]


@pytest.mark.parametrize("mode,reaches", [("mig", False), ("merges", True)])
def test_async_checkpoint_copies_reach_the_serving_gpu_only_where_training_shares_it(mode, reaches):
    """DCP-style async staging copies press on the GPUs training shares: under `mig` the sidecar's
    slice is its own, so even a copy weight of 50 leaves serving exactly as with none."""

    def run(weight):
        sc = with_overrides(_sc(mode), {"merge.checkpoint_mode": "async", "interference.gpu_stage_weight": weight})
        return simulate(sc, 0)

    light, heavy = run(0.0), run(50.0)
    assert light.summary["merges"] > 0
    same = np.array_equal(light.requests["finish"], heavy.requests["finish"], equal_nan=True)
    assert same != reaches
