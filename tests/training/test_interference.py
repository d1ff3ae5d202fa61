"""Merge/serving interference must emerge from shared resources and match the H200 measurements."""

from __future__ import annotations

import numpy as np
import pytest

from wadiloco.models.network.collective import link_efficiency, ring_latency_s
from wadiloco.models.spec.load import MergeConfig, scenario_from_dict
from wadiloco.models.training.interference import measured_ratio
from wadiloco.sim.fleet import simulate
from wadiloco.sim.probe import slowdown

# (mode, phase, statistic compared). `all` ran stage+outer+ckpt as concurrent threads whose outer
# loop was itself slowed, so its p50 mixes contended and free steps; its p95 is the contended
# step, which is what the always-on probe reproduces. The prefill `all` p95 (1.70, from 94
# samples with the outer thread running less than half the window) is not reproduced by an
# always-on probe and is left out; docs/calibration.md lists it as a known gap.
CASES = [
    ("decode_graph_b64_ctx1024", "stage", "p50_ratio"),
    ("decode_graph_b64_ctx1024", "outer", "p50_ratio"),
    ("decode_graph_b64_ctx1024", "ckpt", "p50_ratio"),
    ("decode_graph_b64_ctx1024", "all", "p95_ratio"),
    ("decode_eager_b64_ctx1024", "stage", "p50_ratio"),
    ("decode_eager_b64_ctx1024", "outer", "p50_ratio"),
    ("decode_eager_b64_ctx1024", "ckpt", "p50_ratio"),
    ("decode_eager_b64_ctx1024", "all", "p95_ratio"),
    ("prefill_graph_2048", "stage", "p50_ratio"),
    ("prefill_graph_2048", "outer", "p50_ratio"),
    ("prefill_graph_2048", "ckpt", "p50_ratio"),
]


@pytest.mark.parametrize("mode,phase,stat", CASES)
def test_emergent_slowdown_matches_measurement(mode, phase, stat):
    sim = slowdown(mode, phase)[stat]
    meas = measured_ratio(mode, phase, stat)
    assert abs(sim / meas - 1) <= 0.15, f"{mode}/{phase}: simulated {sim:.3f} vs measured {meas:.3f}"


@pytest.mark.parametrize(
    "mode,phase,resource",
    [
        ("decode_graph_b64_ctx1024", "outer", "gpu"),
        ("prefill_graph_2048", "outer", "gpu"),
        ("decode_graph_b64_ctx1024", "stage", "gpu"),
        ("decode_eager_b64_ctx1024", "ckpt", "host"),
        # Staging presses on both the host and (same_gpu) the GPU: both must go.
        ("decode_eager_b64_ctx1024", "stage", "host,gpu"),
    ],
)
def test_unlimited_resource_removes_its_interference(mode, phase, resource):
    assert slowdown(mode, phase)["p50_ratio"] > 1.005  # the interference is there...
    unl = tuple(resource.split(","))
    assert slowdown(mode, phase, unlimited=unl)["p95_ratio"] == pytest.approx(1.0, abs=1e-9)  # ...and gone


def _fleet_sc(unlimited=(), **extra):
    d = {
        "name": "emerge",
        "horizon_s": 150,
        "drain_s": 60,
        "fleet": {"islands": 2, "hosts_per_island": 1, "colocation": "same_gpu", "unlimited": list(unlimited)},
        "engine": {"cuda_graphs": False},
        "merge": {"h_min": 32, "h_max": 64},
        "workload": {"kind": "normal", "load": 0.7},
        "policy": {"name": "fixed", "params": {"H": 48}},
    }
    d.update(extra)
    return scenario_from_dict(d)


def test_merges_slow_serving_only_through_gpu_and_host():
    # With merges holding GPU and host, serving is slower than without merges...
    sc = _fleet_sc()
    merged = simulate(sc, 3, check=True)
    alone = simulate(sc, 3, "no_sync", {}, check=True)
    assert merged.summary["merges"] >= 3
    assert merged.summary["contended_iterations"] > 0
    assert np.nansum(merged.requests["e2e"]) > np.nansum(alone.requests["e2e"])
    # ...and with GPU and host unlimited, every request's times equal the no-merge run's (to 1e-9 s).
    sc_u = _fleet_sc(("gpu", "host"))
    merged_u = simulate(sc_u, 3, check=True)
    alone_u = simulate(sc_u, 3, "no_sync", {}, check=True)
    assert merged_u.summary["merges"] == merged.summary["merges"]
    np.testing.assert_allclose(merged_u.requests["finish"], alone_u.requests["finish"], rtol=0, atol=1e-9)
    np.testing.assert_allclose(merged_u.requests["first_token"], alone_u.requests["first_token"], rtol=0, atol=1e-9)


# _fleet_sc: 2 islands x 1 host, 1e9 params. All-reduce: one 2 GB shard per host, ring volume
# 2*(n-1)/n = 1x, 16 Gb per flow, then the ring's 2 steps of latency (a property of the collective,
# not of a resource: no unlimited link takes it away); checkpoint: 8 GB = 64 Gb per host, over NIC,
# uplink, store. The uplink: 25 Gb/s x g * eta(25 Gb/s) (wan_efficiency auto).
WAN = 25 * link_efficiency("auto", 25)
LAT = ring_latency_s(2, 1, MergeConfig().ring_step_latency_s)


@pytest.mark.parametrize(
    "unlimited,phase,expected_s",
    [
        ((), "allreduce", 16 / WAN + LAT),  # bounded by the WAN uplink
        (("links",), "allreduce", 16 / 100 + LAT),  # then by the 100 Gb/s NIC
        (("links", "nic"), "allreduce", LAT),
        ((), "ckpt", 64 / 5.6),  # bounded by per-host serialisation (0.7 GB/s)
        (("storage",), "ckpt", 64 / WAN),  # then by the uplink the checkpoint crosses
        (("storage", "links", "nic"), "ckpt", 0.0),
        ((), "stage", 16 / 440),  # PCIe at 55 GB/s
        (("pcie",), "stage", 0.0),
    ],
)
def test_unlimited_bandwidth_removes_its_phase_time(unlimited, phase, expected_s):
    got = simulate(_fleet_sc(unlimited), 1).summary["merge_phase_mean_s"][phase]
    assert got == pytest.approx(expected_s, rel=1e-9, abs=1e-9)


def test_default_merge_duration_emerges_near_8s():
    sc = scenario_from_dict(
        {
            "name": "dur",
            "horizon_s": 200,
            "workload": {"kind": "normal", "load": 0.3},
            "policy": {"name": "fixed", "params": {"H": 128}},
        }
    )
    s = simulate(sc, 0).summary
    assert s["merges"] >= 2
    assert 6.0 <= s["merge_duration_mean_s"] <= 10.0
    ph = s["merge_phase_mean_s"]
    # ring all-reduce of 1 GB shards over 25 Gb/s x 0.7523 (auto), two flows an uplink:
    # 2*(3/4)*8 Gb / 9.404 Gb/s per flow = 1.276 s, plus 6 ring steps of 106 us
    assert ph["allreduce"] == pytest.approx(12 / (25 * 0.9925 * 0.758 / 2) + 6 * 1.06e-4, rel=1e-6)
    # 4 GB checkpoint shard per host at 0.7 GB/s serialisation
    assert ph["ckpt"] == pytest.approx(4e9 * 8 / 1e9 / 5.6, rel=1e-6)
