"""The socket ring all-reduce (models.network.collective): its law, its fits, and the fleet's ring
over links at r(R) against the closed form."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from wadiloco.models.network import collective as co
from wadiloco.models.spec.resolve import from_dict
from wadiloco.models.workload.kinds import Arrivals
from wadiloco.sim.fleet import Fleet

# a cluster unlike the measured one, so a fit that returned its defaults would fail
TRUE = co.CollectiveParams(
    goodput_factor=0.97,
    eta_max=0.68,
    eta_slope=0.21,
    eta_knee_bps=1.5e9,
    flow_cap_bps=24e9,
    unshaped_ring_bps=41e9,
    alpha_s=4.0e-5,
)
RANKS = 8
GRAD = 4 * 125e6  # 125 M parameters in fp32
SHAPED = [5e7, 2e8, 1e9, 5e9, 1e10]


def test_eta_falls_only_below_the_knee_and_never_rises_as_the_rate_falls():
    p = co.DEFAULT
    rates = np.logspace(5, 11, 400)
    eta = np.array([p.efficiency(r) for r in rates])
    assert np.all(np.diff(eta) >= 0)  # monotone in the rate
    assert np.all(eta[rates >= p.eta_knee_bps] == p.eta_max)  # flat above the knee
    assert p.efficiency(p.eta_knee_bps / 10) == pytest.approx(p.eta_max - p.eta_slope, rel=1e-12)  # a decade
    assert p.efficiency(1.0) == p.eta_floor  # the guard, far below any measured rate
    with pytest.raises(ValueError):
        p.efficiency(0.0)


def test_allreduce_time_is_ring_bytes_over_the_ring_rate_plus_each_calls_latency():
    p, R = co.DEFAULT, 2e8
    r = p.goodput_factor * p.efficiency(R) * R
    t1 = co.allreduce_time(GRAD, 4, R, p)
    assert t1 == pytest.approx(1.5 * 8 * GRAD / r + 6 * p.alpha_s, rel=1e-12)
    assert co.allreduce_time(GRAD, 4, R, p, calls=49) == pytest.approx(t1 + 48 * 6 * p.alpha_s, rel=1e-12)
    # a measured goodput in place of g * R; unshaped: the NCCL plateau's rate
    assert co.allreduce_time(GRAD, 4, R, p, goodput_bps=1.9e8) == pytest.approx(
        1.5 * 8 * GRAD / (p.efficiency(R) * 1.9e8) + 6 * p.alpha_s, rel=1e-12
    )
    assert co.allreduce_time(GRAD, 4, None, p) == pytest.approx(1.5 * 8 * GRAD / p.unshaped_ring_bps + 6 * p.alpha_s)
    assert co.allreduce_time(GRAD, 1, R, p) == 0.0  # no ring
    # the bytes-over-rate estimate it replaces is faster at every rate
    assert all(co.analytic_time(GRAD, 4, x) < co.allreduce_time(GRAD, 4, x, p) for x in SHAPED)


def test_wan_efficiency_auto_is_the_law_and_a_number_overrides_it():
    p = co.DEFAULT
    assert co.link_efficiency("auto", 25.0) == pytest.approx(p.goodput_factor * p.eta_max, rel=1e-12)
    assert co.link_efficiency("auto", 0.2) == pytest.approx(p.goodput_factor * p.efficiency(2e8), rel=1e-12)
    assert co.link_efficiency(0.6, 25.0) == 0.6


def _busbw_curve(p: co.CollectiveParams, sizes) -> list[tuple[float, float]]:
    """What nccl-tests' busbw column shows for an unshaped ring of these parameters."""
    out = []
    for m in sizes:
        t = co.allreduce_time(m, RANKS, None, p)
        out.append((m, co.ring_bytes_per_rank(m, RANKS) * 8 / t))
    return out


def _ddp(p: co.CollectiveParams, rate, overlap=0.3, compute=0.05) -> co.DDPRun:
    run = co.DDPRun(rate, 0.0, compute, GRAD, overlap)
    t = co.allreduce_time(GRAD, RANKS, rate, p, calls=run.calls())
    return co.DDPRun(rate, run.blocked(t), compute, GRAD)  # the fit must find the overlap itself


def test_the_fit_recovers_known_parameters_from_synthetic_measurements():
    sizes = [2**20, 2**24, 2**26, 2**28, 2**30]  # the 1 MiB point pins alpha; >= 16 MiB the plateau
    ddp = [_ddp(TRUE, None)] + [_ddp(TRUE, r) for r in SHAPED]
    shaped = [(r, TRUE.goodput_factor * r) for r in SHAPED]
    got, rep = co.fit(RANKS, [24e9, 23e9, 25e9], _busbw_curve(TRUE, sizes), "busbw", shaped, ddp)
    assert rep["ddp_overlap"] == pytest.approx(0.3, rel=1e-9)
    for name in ("goodput_factor", "unshaped_ring_bps", "alpha_s", "flow_cap_bps"):
        assert getattr(got, name) == pytest.approx(getattr(TRUE, name), rel=1e-9), name
    # the knee is searched on a grid (0.0017 decades a step): the curve is recovered to that
    assert got.eta_knee_bps == pytest.approx(TRUE.eta_knee_bps, rel=5e-3)
    assert got.eta_max == pytest.approx(TRUE.eta_max, rel=1e-4)
    assert got.eta_slope == pytest.approx(TRUE.eta_slope, rel=5e-3)
    for r in SHAPED:
        assert got.efficiency(r) == pytest.approx(TRUE.efficiency(r), rel=1e-3)
    # read as algbw, the same times give the same fit
    algbw = [(m, bw * RANKS / (2 * (RANKS - 1))) for m, bw in _busbw_curve(TRUE, sizes)]
    again, _ = co.fit(RANKS, None, algbw, "algbw")
    assert again.unshaped_ring_bps == pytest.approx(TRUE.unshaped_ring_bps, rel=1e-9)


def test_without_a_measurement_a_parameter_keeps_its_default():
    got, rep = co.fit(4)
    assert got == co.DEFAULT and "eta_points" not in rep
    got, _ = co.fit(4, nccl_curve=_busbw_curve(TRUE, [2**26, 2**28]))  # no small message: no latency
    assert got.alpha_s == 0.0 and got.eta_max == co.DEFAULT.eta_max


def test_sync_calls_are_counted_from_a_syncs_time_beyond_one_allreduce():
    p = co.DEFAULT
    sync = co.allreduce_time(GRAD, 4, None, p, calls=49)
    assert co.fit_sync_calls(sync, GRAD, 4, p) == 49
    assert co.fit_sync_calls(0.5 * sync, GRAD, 4, p) == 1  # never fewer than one


NCCL_TESTS = """\
# nThread 1 nGpus 1 minBytes 1048576 maxBytes 1073741824 step: 4(factor) warmup iters: 5 iters: 20
#  Rank  0 Group  0 Pid  101 on node-a device  0 [0x00] NVIDIA L40S
#  Rank  1 Group  0 Pid  102 on node-b device  0 [0x00] NVIDIA L40S
#  Rank  2 Group  0 Pid  103 on node-c device  0 [0x00] NVIDIA L40S
#  Rank  3 Group  0 Pid  104 on node-d device  0 [0x00] NVIDIA L40S
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
     1048576        262144     float     sum      -1   985.9    1.06    1.60      0   990.1    1.06    1.59      0
   268435456      67108864     float     sum      -1   143285    1.87    2.81      0   143301    1.87    2.81      0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 2.2
"""


def test_the_parsers_read_nccl_tests_and_iperf3():
    pts = co.parse_nccl(NCCL_TESTS, "nccl.txt")
    assert pts == [(1048576.0, 1.60 * 8e9), (268435456.0, 2.81 * 8e9)]
    assert co.parse_nccl(NCCL_TESTS, "nccl.txt", "algbw")[1] == (268435456.0, 1.87 * 8e9)
    doc = json.dumps([{"msg_bytes": 2**20, "bps": 8.5e9}])
    assert co.parse_nccl(doc, "nccl.json") == [(2.0**20, 8.5e9)]
    iperf = {"start": {}, "end": {"sum_sent": {"bits_per_second": 9.6e9}, "sum_received": {"bits_per_second": 9.53e9}}}
    assert co.parse_iperf3(json.dumps(iperf), "i.json") == 9.53e9


# ---- the fleet's ring over links at r(R) --------------------------------------------------------
P = 30_846_720


def _ring_fleet(rate_gbps: float, hosts: int = 1, **merge) -> Fleet:
    d = {
        "horizon_s": 1e4,
        "drain_s": 0.0,
        "fleet": {"islands": 4, "hosts_per_island": hosts, "nic_gbps": 100.0, "interisland_gbps": rate_gbps},
        "training": {"params": float(P * hosts)},
        "merge": {"phases": ["allreduce"], "pseudo_grad_bytes_per_param": 4.0, **merge},
        "policy": {"name": "no_sync"},
        "workload": {"kind": "normal"},
    }
    r = from_dict(d)
    empty = Arrivals(np.zeros(0), np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
    return Fleet(r, seed=0, arrivals=[empty] * r.fleet.n_sidecars)


def _allreduces(f: Fleet, n: int) -> list[float]:
    """Seconds of n all-reduce phases run back to back on the fleet's merge executor."""
    out = []

    def go():
        for _ in range(n):
            t0 = f.env.now
            yield from f.merge.run_phase("allreduce")
            out.append(f.env.now - t0)

    f.env.process(go())
    f.env.run()
    return out


@pytest.mark.parametrize("rate_gbps", [0.05, 0.2, 1.0, 5.0, 25.0])
def test_the_fleets_ring_over_links_at_r_equals_the_closed_form(rate_gbps):
    first, second = _allreduces(_ring_fleet(rate_gbps, allreduce_calls=49, allreduce_setup_s=0.7), 2)
    want = co.allreduce_time(4 * P, 4, rate_gbps * 1e9, co.DEFAULT, calls=49)
    assert second == pytest.approx(want, rel=1e-9)
    assert first == pytest.approx(want + 0.7, rel=1e-9)  # the set-up, once a run


def test_two_rings_on_one_uplink_share_it_through_the_fabric():
    """Two hosts an island: two rings over each uplink, each at half its rate: the sharing emerges
    from the fair-share fabric, nothing multiplies it."""
    (t,) = _allreduces(_ring_fleet(1.0, hosts=2), 1)
    ring = co.DEFAULT.ring_rate_bps(1e9) / 2
    assert t == pytest.approx(1.5 * 8 * 4 * P / ring + co.ring_latency_s(4, 1, co.DEFAULT.alpha_s), rel=1e-9)
    assert not math.isclose(t, co.allreduce_time(4 * P, 4, 1e9), rel_tol=0.1)
