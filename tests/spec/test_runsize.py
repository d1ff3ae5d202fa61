"""The run-size estimate (models.spec.runsize) against what runs do: each cost driver's count within
0.8-1.25x of the run's own counter, on small fast runs (the refusals through the real command line are
tests/bad_inputs/17_run_size.yaml). The open-loop request count is tests/spec/test_reliability.py's."""

from __future__ import annotations

import random

import numpy as np
import pytest

from wadiloco.models.spec.load import scenario_from_dict
from wadiloco.models.spec.resolve import resolve
from wadiloco.models.spec.runsize import estimate
from wadiloco.sim.fleet import Fleet


def run(d: dict, seed: int = 0):
    """(the estimate, the fleet after its run, the run's result) of scenario `d`."""
    spec = resolve(scenario_from_dict({"name": "x", **d}))
    fleet = Fleet(spec, seed)
    return estimate(spec), fleet, fleet.run()


def near(est: float, actual: float) -> None:
    assert actual > 0 and 0.8 * actual <= est <= 1.25 * actual, (est, actual)


QUIET = {"policy": {"name": "no_sync"}}


@pytest.mark.parametrize(
    "workload",
    [
        {"kind": "closed_loop", "mode": "batch", "concurrency": {"kind": "steady", "c": 8}, "client_gap_s": 0.2},
        {
            "kind": "closed_loop",
            "concurrency": {"kind": "bursty", "quiet": 4, "busy": 16, "period_s": 20, "window_s": 5},
            "prompts": "long",
            "output_tokens": 64,
        },
        {
            "kind": "closed_loop",
            "mode": "users",
            "users": 24,
            "think_s": {"kind": "exponential", "mean_s": 1.0},
            "prompts": {"mean": 800, "median": 700},
            "output_tokens": {"mean": 150, "median": 120},
        },
    ],
    ids=["batch", "bursty_batches", "users"],
)
def test_closed_loop_requests(workload):
    est, _, res = run({"horizon_s": 40, "drain_s": 20, "workload": workload, **QUIET})
    near(est.counts["requests"], res.summary["requests"])


def test_host_core_preemptions():
    est, fleet, _ = run({"horizon_s": 8, "drain_s": 4, "fleet": {"host_cores": 4}, **QUIET})
    near(est.counts["preemptions"], sum(p.count for hr in fleet.res.hosts for p in hr.cpu.preempters))
    assert est.fields["preemptions"] == "fleet.host_cores"


@pytest.mark.parametrize(
    "merge, h",
    [({"h_min": 16, "h_max": 32}, 16), ({"h_min": 16, "h_max": 32, "fragments": 4}, 16), ({"fragments": 64}, 8)],
    ids=["merges", "fragments", "overlapping_fragments"],
)
def test_merges_times_fragments(merge, h):
    """At H = h_min (the most merges the corridor allows), each merge one round of `fragments` fragments;
    fragments that start together move the whole model at once, so a round lasts a whole merge."""
    merge = {"h_min": h, "h_max": 2 * h, **merge}
    est, _, res = run({"horizon_s": 60, "drain_s": 10, "merge": merge, "policy": {"name": "fixed", "params": {"H": h}}})
    near(est.counts["merges"], res.summary["merges"] * merge.get("fragments", 1))


def test_a_replayed_schedule():
    params = {"starts": [5, 20, 35], "repeat_s": 15, "window_s": 1}
    est, _, res = run({"horizon_s": 60, "drain_s": 10, "policy": {"name": "replay", "params": params}})
    near(est.counts["merges"], res.summary["merges"])
    # a schedule walked through without being listed: 6e8 instants a microsecond apart, counted at once
    tiny = {"starts": [0.0], "repeat_s": 1.0e-6, "window_s": 0}
    spec = resolve(scenario_from_dict({"name": "x", "horizon_s": 600, "policy": {"name": "replay", "params": tiny}}))
    assert estimate(spec).counts["schedule"] == pytest.approx(6e8, rel=1e-6)


DISAGG = {
    "fleet": {"islands": 2, "hosts_per_island": 2, "sidecars_per_host": 2},
    "workload": {"kind": "normal", "load": 0.3},
}


def test_disaggregated_hand_offs():
    """Below saturation: the hand-offs, their flow-seconds (the transfers' durations summed: Little's
    law over the links they bind on) and the iterations of engines that step one at a time."""
    d = {"horizon_s": 30, "drain_s": 60, **DISAGG, "disagg": {"prefill_sidecars": [0, 1, 4, 5]}, **QUIET}
    est, _, res = run(d)
    near(est.counts["kv_flows"], res.summary["disagg"]["kv_transfers"])
    near(est.counts["kv_flow_s"], float(np.nansum(res.requests["kv_transfer_s"])))
    near(est.counts["fed_iterations"], res.summary["engine_iterations"])
    assert "backlog" not in est.terms["kv_flow_s"].what


@pytest.mark.parametrize("horizon,load,drain", [(20, 0.3, 200), (10, 0.5, 300)])
def test_a_kv_backlog_is_seen(horizon, load, drain):
    """Seven prefill sidecars hand off to one decode sidecar across the WAN: the island's downlink is
    offered several times what it carries, so transfers pile up for the whole horizon and drain after
    it (every one ends within the drain here); the decode side then sees them over that longer span.
    The flow-seconds follow the backlog's fluid, where the short prompts' transfers finish first."""
    d = {"horizon_s": horizon, "drain_s": drain, "workload": {"kind": "normal", "load": load}, **QUIET}
    est, _, res = run({**d, "disagg": {"prefill_sidecars": list(range(7))}})
    near(est.counts["kv_flows"], res.summary["disagg"]["kv_transfers"])
    near(est.counts["fed_iterations"], res.summary["engine_iterations"])
    assert "backlog" in est.terms["kv_flow_s"].what and est.fields["kv_flows"] == "disagg.kv_bytes_per_token"
    moved = res.requests["output"] > 1
    assert not np.isnan(res.requests["kv_transfer_s"][moved]).any()
    near(est.counts["kv_flow_s"], float(np.nansum(res.requests["kv_transfer_s"])))


POOL = {
    "horizon_s": 12,
    "drain_s": 30,
    "fleet": {"islands": 8, "hosts_per_island": 2},
    "engine": {"prefix_cache": 8192, "shared_prefix": {"fraction": 0.8, "prompts": 3, "tokens": 2048}},
    "merge": {"h_min": 8, "h_max": 16},
    "policy": {"name": "fixed", "params": {"H": 8}},
    "workload": {"kind": "normal", "load": 0.15},
    "remote_kv": {},
}


@pytest.mark.parametrize("cache", [8192, 65536], ids=["evicting", "keeping"])
def test_remote_kv_fetches_and_lookups(cache):
    """A small cache loses the system prompts between uses (fetched again: Che's approximation of its
    LRU); a large one keeps them (each sidecar fetches what it has not seen, depth by depth)."""
    d = {**POOL, "engine": {**POOL["engine"], "prefix_cache": cache}}
    est, _, res = run(d)
    near(est.counts["kv_flows"], res.summary["remote_kv"]["fetches"])
    near(est.counts["fed_iterations"], res.summary["engine_iterations"])
    assert est.counts["lookups"] == pytest.approx(est.counts["requests"] * 16)


def test_routing_decisions():
    d = {"horizon_s": 15, "drain_s": 10, "fleet": {"islands": 4, "hosts_per_island": 2, "sidecars_per_host": 2}}
    est, _, res = run({**d, "router": {"name": "least_outstanding"}, "workload": {"kind": "normal", "load": 0.3}})
    near(est.counts["routing"], sum(res.summary["router"]["routed"]))


def test_cotenant_windows():
    tt = {"kind": "periodic", "period_s": 0.5, "window_s": 0.2}
    est, _, res = run({"horizon_s": 30, "drain_s": 10, "cotenant": {"weight": 0.5, "timetable": tt, "poll_s": 0}})
    near(est.counts["cotenant"], res.summary["cotenant"]["windows"])


def test_requests_on_random_small_scenarios():
    """A few random open- and closed-loop fleets (a property test, seeded): requests near. (Poisson
    load: a bursty kind's count over one seed varies with where its bursts fall; no merges: they slow
    a closed loop's batches, which the estimate does not try to foresee.)"""
    rng = random.Random(7)
    for _ in range(5):
        d = {
            "horizon_s": rng.choice([30, 60, 120]),
            "drain_s": 20,
            "fleet": {"islands": rng.choice([1, 2, 4]), "hosts_per_island": rng.choice([1, 2])},
            "workload": rng.choice(
                [
                    {"kind": "normal", "load": rng.choice([0.2, 0.5, 0.8])},
                    {"kind": "closed_loop", "concurrency": {"kind": "steady", "c": rng.choice([4, 16, 64])}},
                ]
            ),
            **QUIET,
        }
        est, _, res = run(d, seed=rng.randrange(100))
        near(est.counts["requests"], res.summary["requests"])
