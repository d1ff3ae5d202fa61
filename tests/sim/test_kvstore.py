"""The remote KV/prefix pool (`remote_kv:`, sim/kvstore.py): a request fetches the
prefix blocks another sidecar's cache holds over the network before it enters its engine; TTFT waits
for bytes over bandwidth, merges' flows slow it, unlimited links remove exactly that."""

from __future__ import annotations

import numpy as np
import pytest

from wadiloco.models.engine.latency import default_latency
from wadiloco.models.errors import InputError
from wadiloco.models.spec.load import scenario_from_dict
from wadiloco.models.workload.kinds import Arrivals
from wadiloco.sim.fleet import simulate

KIB128 = 2 * 32 * 8 * 128 * 2  # Llama-3-8B bf16 KV bytes per token (docs/sources.md, model shape)


def _sc(unlimited=(), islands=1, remote=True, **extra):
    return scenario_from_dict(
        {
            "name": "remote_kv",
            "horizon_s": 12,
            "drain_s": 30,
            "fleet": {"islands": islands, "hosts_per_island": 2, "unlimited": list(unlimited)},
            "engine": {"prefix_cache": 8192, "shared_prefix": {"fraction": 0.8, "prompts": 3, "tokens": 2048}},
            "merge": {"h_min": 8, "h_max": 16},
            "policy": {"name": "fixed", "params": {"H": 8}},
            "workload": {"kind": "normal", "load": 0.15},
            **({"remote_kv": {}} if remote else {}),
            **extra,
        }
    )


def _two(hashes_b) -> list[Arrivals]:
    a = Arrivals(np.array([1.0]), np.array([1500], np.int64), np.array([2], np.int64), ((1, 2, 3),))
    b = Arrivals(np.array([3.0]), np.array([1500], np.int64), np.array([2], np.int64), (hashes_b,))
    return [a, b]


def test_hand_case_ttft_waits_for_the_fetch_then_the_rest_of_the_prompt():
    """Sidecar 0 computed blocks (1, 2, 3) at t=1; at t=3 sidecar 1 gets a prompt starting (1, 2):
    it fetches 2 x 512 tokens of KV over the island's NICs (100 Gb/s binds) and prefills the other 476."""
    sc = _sc()
    lat, h = default_latency("linear"), sc.engine.host_overhead_s
    got = simulate(sc, 0, "no_sync", arrivals=_two((1, 2, 99))).requests
    fetch = 1024 * KIB128 * 8 / 1e9 / sc.fleet.nic_gbps
    b = int(np.flatnonzero(got["sidecar"] == 1)[0])
    assert got["kv_fetch_s"][b] == pytest.approx(fetch, rel=1e-12) and got["kv_fetched_tokens"][b] == 1024
    assert got["ttft"][b] == pytest.approx(fetch + max(h, lat.a + lat.b * 476 + lat.d), rel=1e-12)
    alone = simulate(_sc(remote=False), 0, "no_sync", arrivals=_two((1, 2, 99))).requests
    assert alone["ttft"][b] == pytest.approx(max(h, lat.a + lat.b * 1500 + lat.d), rel=1e-12)
    none = simulate(sc, 0, "no_sync", arrivals=_two((7, 8, 9))).requests  # nothing to fetch: enters at once
    assert none["kv_fetch_s"][b] == 0 and none["ttft"][b] == alone["ttft"][b]


def test_merges_slow_the_fetches_and_unlimited_network_removes_exactly_that():
    off = ("gpu", "host", "pcie")
    quiet, busy = simulate(_sc(off, islands=2), 1, "no_sync"), simulate(_sc(off, islands=2), 1)
    assert busy.summary["merges"] >= 1 and quiet.summary["remote_kv"]["fetches"] > 0
    q, b = quiet.requests, busy.requests
    during = (b["merge"] >= 0) & (b["kv_fetched_tokens"] > 0)
    assert during.any() and b["kv_fetch_s"][during].sum() > q["kv_fetch_s"][during].sum() * 1.01
    net = (*off, "nic", "links")
    quiet, busy = simulate(_sc(net, islands=2), 1, "no_sync"), simulate(_sc(net, islands=2), 1)
    for k in ("admitted", "first_token", "finish", "kv_fetch_s", "kv_fetched_tokens"):
        assert np.array_equal(quiet.requests[k], busy.requests[k], equal_nan=True), k
    assert (busy.requests["kv_fetch_s"] == 0).all() and busy.summary["remote_kv"]["fetches"] > 0


def test_remote_kv_needs_a_prefix_cache_and_no_disagg():
    with pytest.raises(InputError, match="needs engine.prefix_cache"):
        simulate(_sc(engine={}), 0, "no_sync")
    with pytest.raises(InputError, match="do not combine"):
        _sc(disagg={"prefill_sidecars": [0]})
