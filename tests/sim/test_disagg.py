"""Disaggregated prefill/decode serving (`disagg:`, sim/disagg.py): the KV hand-off's
time is bytes over the links between the hosts, merges' traffic on those links slows it, unlimited
links remove exactly that, and every request is served and counted once."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from wadiloco.models.engine.latency import default_latency
from wadiloco.models.errors import InputError
from wadiloco.models.spec.load import scenario_from_dict
from wadiloco.models.workload.kinds import Arrivals
from wadiloco.sim.fleet import simulate

KIB128 = 2 * 32 * 8 * 128 * 2  # Llama-3-8B bf16 KV bytes per token (docs/sources.md, model shape)


def _sc(unlimited=(), horizon=20.0, load=0.15, islands=2, hosts=2, prefill=(0, 2), **extra):
    return scenario_from_dict(
        {
            "name": "disagg",
            "horizon_s": horizon,
            "drain_s": 30,
            "fleet": {"islands": islands, "hosts_per_island": hosts, "unlimited": list(unlimited)},
            "merge": {"h_min": 8, "h_max": 16},
            "policy": {"name": "fixed", "params": {"H": 8}},
            "disagg": {"prefill_sidecars": list(prefill)},
            "workload": {"kind": "normal", "load": load},
            **extra,
        }
    )


def _one(prompt: int, output: int, n_sidecars: int, at: float = 1.0) -> list[Arrivals]:
    empty = Arrivals(np.empty(0), np.empty(0, np.int64), np.empty(0, np.int64))
    one = Arrivals(np.array([at]), np.array([prompt], np.int64), np.array([output], np.int64))
    return [one] + [empty] * (n_sidecars - 1)


def test_hand_case_ttft_is_the_prefill_plus_bytes_over_the_nic():
    """One request of 1000 tokens, prefill on host 0, decode on host 1 of the same island: the KV
    (1000 x 128 KiB) crosses two NIC edges and the switch backplane; the NIC (100 Gb/s) binds."""
    sc = _sc(islands=1, hosts=2, prefill=(0,))
    r = simulate(sc, 0, "no_sync", arrivals=_one(1000, 5, 2))
    req = r.requests
    lat = default_latency("linear")
    prefill = max(sc.engine.host_overhead_s, lat.a + lat.b * 1000 + lat.d * 1)  # one iteration, alone
    transfer = 1000 * KIB128 * 8 / 1e9 / sc.fleet.nic_gbps
    assert req["kv_transfer_s"][0] == pytest.approx(transfer, rel=1e-12)
    assert req["ttft"][0] == pytest.approx(prefill + transfer, rel=1e-12)
    assert req["decode_sidecar"][0] == 1 and req["sidecar"][0] == 0 and req["completed"][0]
    d = r.summary["disagg"]
    assert d["kv_bytes"] == 1000 * KIB128 and d["kv_transfers"] == 1


def test_the_decoder_admits_with_the_prompt_cached_and_computes_no_prefill():
    """After the hand-off the decode engine's first iteration has no prefill tokens (one sequence),
    then the request decodes from context prompt + 1: the 4 tokens left of 5 take exactly these
    iterations, alone on the decoder."""
    sc = _sc(islands=1, hosts=2, prefill=(0,))
    req = simulate(sc, 0, "no_sync", arrivals=_one(1000, 5, 2)).requests
    lat, h = default_latency("linear"), sc.engine.host_overhead_s
    steps = [lat.a + lat.d] + [lat.a + lat.c * (1000 + 1 + k) + lat.d for k in range(3)]
    assert req["finish"][0] - req["first_token"][0] == pytest.approx(sum(max(h, g) for g in steps), rel=1e-9)


def test_one_token_requests_finish_at_their_prefill():
    r = simulate(_sc(islands=1, hosts=2, prefill=(0,)), 0, "no_sync", arrivals=_one(300, 1, 2))
    req = r.requests
    assert req["kv_transfer_s"][0] == 0.0 and req["decode_sidecar"][0] == -1
    assert req["finish"][0] == req["first_token"][0] and r.summary["disagg"]["kv_bytes"] == 0


def test_every_request_once_and_deterministic():
    sc = _sc(horizon=12.0)
    a, b = simulate(sc, 3), simulate(sc, 3)
    req = a.requests
    assert a.summary["merges"] >= 1 and req["completed"].all()
    assert len(req["arrival"]) == a.summary["requests"] == sum(1 for _ in req["arrival"])  # no prefill rows
    assert set(np.unique(req["sidecar"])) == {0, 2}  # every row is on its prefill sidecar
    long = req["output"] > 1
    assert (req["decode_sidecar"][long] >= 0).all() and (req["decode_sidecar"][~long] == -1).all()
    # island-local hand-offs: 0 -> 1, 2 -> 3
    assert set(zip(req["sidecar"][long], req["decode_sidecar"][long])) <= {(0, 1), (2, 3)}
    for k in req:
        assert np.array_equal(req[k], b.requests[k], equal_nan=True), k
    assert a.summary["disagg"] == b.summary["disagg"]
    c = simulate(sc, 3, lookahead=False)
    for k in req:
        assert np.array_equal(req[k], c.requests[k], equal_nan=True), k


def test_merges_slow_the_kv_transfer_and_unlimited_network_removes_exactly_that():
    """Serving's GPU, host and PCIe unlimited: merges reach serving only through the network. Their
    all-reduce and checkpoint flows share the prefill hosts' NICs with the KV, so hand-offs during
    a merge take longer; with the NICs and switches unlimited too, the run equals no_sync's."""
    off = ("gpu", "host", "pcie")
    quiet, busy = simulate(_sc(off), 1, "no_sync"), simulate(_sc(off), 1)
    assert busy.summary["merges"] >= 1
    q, b = quiet.requests, busy.requests
    assert np.array_equal(q["arrival"], b["arrival"])
    during = b["merge"] >= 0
    assert during.any() and b["kv_transfer_s"][during].sum() > q["kv_transfer_s"][during].sum() * 1.01
    assert not np.array_equal(q["first_token"], b["first_token"], equal_nan=True)
    net = (*off, "nic", "links")
    quiet, busy = simulate(_sc(net), 1, "no_sync"), simulate(_sc(net), 1)
    assert busy.summary["merges"] >= 1
    for k in ("admitted", "first_token", "finish", "kv_transfer_s", "decode_sidecar"):
        assert np.array_equal(quiet.requests[k], busy.requests[k], equal_nan=True), k
    assert (busy.requests["kv_transfer_s"] == 0).all()


@pytest.mark.parametrize(
    "disagg,extra,match",
    [
        ({"prefill_sidecars": [4]}, {}, "indices 0..3"),
        ({"prefill_sidecars": [0, 1, 2, 3]}, {}, "at least one left to decode"),
        ({"prefill_sidecars": [0, 0]}, {}, "distinct"),
        ({"prefill_sidecars": []}, {}, "at least 1"),
        ({"prefill_sidecars": [0], "nope": 1}, {}, "nope"),
    ],
)
def test_bad_disagg_blocks_are_rejected(disagg, extra, match):
    with pytest.raises(InputError, match=match):
        scenario_from_dict({"fleet": {"islands": 2, "hosts_per_island": 2}, "disagg": disagg, **extra})


def test_disagg_needs_an_open_loop_and_its_own_dealing():
    with pytest.raises(InputError, match="deals requests"):
        simulate(_sc(router={"name": "round_robin"}), 0, "no_sync")
    closed = {"kind": "closed_loop", "mode": "users", "users": 4}
    with pytest.raises(InputError, match="closed-loop"):
        simulate(_sc(workload=closed), 0, "no_sync")
    with pytest.raises(InputError, match="prefix_cache"):
        simulate(_sc(engine={"prefix_cache": 4096}), 0, "no_sync")


def _same(a, b) -> None:
    for k in a.requests:
        assert np.array_equal(a.requests[k], b.requests[k], equal_nan=True), k
    sa, sb = dict(a.summary), dict(b.summary)
    sa.pop("wall_time_s", None), sb.pop("wall_time_s", None)
    assert repr(sa) == repr(sb)


def _ahead_case(islands, hosts, per_host, prefill, load, kv, cotenant, horizon):
    extra: dict = {"fleet": {"islands": islands, "hosts_per_island": hosts, "sidecars_per_host": per_host}}
    if kv is not None:
        extra["engine"] = {"kv_blocks": kv}
    if cotenant:
        extra["cotenant"] = {"weight": 1.0, "timetable": {"kind": "periodic", "period_s": 3.0, "window_s": 1.0}}
    return scenario_from_dict(
        {
            "name": "disagg-ahead",
            "horizon_s": horizon,
            "drain_s": 5,
            "merge": {"h_min": 2, "h_max": 8},
            "policy": {"name": "fixed", "params": {"H": 2}},
            "disagg": {"prefill_sidecars": prefill},
            "workload": {"kind": "normal", "load": load},
            **extra,
        }
    )


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    islands=st.integers(1, 3),
    hosts=st.integers(1, 2),
    per_host=st.integers(1, 2),
    picks=st.lists(st.integers(0, 11), min_size=1, max_size=6, unique=True),
    load=st.sampled_from([0.1, 0.3, 0.6]),
    kv=st.sampled_from([None, 600, 4000]),
    cotenant=st.booleans(),
    seed=st.integers(0, 3),
)
# a prefill engine's run cut short (a co-tenant window or merge work leaves its GPU): its prefill ends
# before the wake-up it had planned, and a same-host hand-off's KV is in soon after
@example(islands=1, hosts=2, per_host=2, picks=[0, 3], load=0.3, kv=4000, cotenant=True, seed=3)
def test_the_decode_engines_run_ahead_exactly(islands, hosts, per_host, picks, load, kv, cotenant, seed):
    """Random disaggregated fleets (merges, KV pools that preempt, a co-tenant, same-host, same-island
    and cross-island hand-offs): the decode engines' own bound (sim.disagg feeds_at) gives the bytes
    of a run whose engines step one iteration at a time."""
    n = islands * hosts * per_host
    prefill = sorted({p % n for p in picks})
    assume(len(prefill) < n)
    sc = _ahead_case(islands, hosts, per_host, prefill, load, kv, cotenant, 5.0)
    _same(simulate(sc, seed), simulate(sc, seed, lookahead=False))


def test_kv_flows_that_finish_together_all_enter_before_their_decoder_runs_ahead():
    """Two equal requests prefilled at the same instant on two sidecars of one host hand off to the one
    decoder on the other host over the same links: their flows end at one instant. The first to enter
    starts the idle decoder; it must not book past that instant before the second has entered (as
    when every engine steps one iteration at a time, the second joins its second iteration)."""
    sc = _ahead_case(1, 2, 2, [0, 1, 3], 0.1, None, False, 5.0)
    two = Arrivals(np.array([1.0, 1.0]), np.array([700, 700], np.int64), np.array([40, 40], np.int64))
    empty = Arrivals(np.empty(0), np.empty(0, np.int64), np.empty(0, np.int64))
    arrivals = [two, empty, empty, empty]
    on, off = simulate(sc, 0, arrivals=arrivals), simulate(sc, 0, arrivals=arrivals, lookahead=False)
    req = on.requests
    assert list(req["decode_sidecar"]) == [2, 2] and req["first_token"][0] == req["first_token"][1]
    assert req["admitted"][1] == req["admitted"][0]  # (prefilled together)
    _same(on, off)


@pytest.mark.parametrize("fed", ["disagg", "remote_kv"])
def test_fleets_fed_from_outside_swap_over_the_hosts_pcie(fed):
    """Engines fed from outside are built as every sidecar is, with their host's PCIe link, so a KV pool
    that runs short swaps there (it was refused at build time); an unlimited PCIe makes the copies free,
    which changes the run; lookahead on or off gives the same bytes."""
    d = _sc(horizon=10.0, load=0.5, engine={"kv_blocks": 300, "preemption": "swap"}).model_dump(exclude_none=True)
    if fed == "remote_kv":  # the same fleet, its prefix caches pooled
        del d["disagg"]
        d["remote_kv"], d["engine"]["prefix_cache"] = {}, 1024
    sc = scenario_from_dict(d)
    a = simulate(sc, 1)
    assert a.summary["swap_blocks"] > 0
    assert a.summary["requests"] == a.summary["completed"] + a.summary["unfinished"]
    _same(a, simulate(sc, 1, lookahead=False))
    free = simulate(scenario_from_dict({**d, "fleet": {**d["fleet"], "unlimited": ["pcie"]}}), 1)
    assert free.summary["swap_blocks"] > 0
    assert not np.array_equal(a.requests["finish"], free.requests["finish"], equal_nan=True)
