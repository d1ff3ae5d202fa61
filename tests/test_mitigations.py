"""Checkpoint serialisation as CPU work, and the training-side mitigations (issue 15, items 2 and 4).

Most cases run one merge phase directly on a fleet's `MergeExecutor` (as sim.probe does) so they
cost milliseconds; `host_work` records when each host's merge CPU work pressed on its CPU paths.
"""

from __future__ import annotations

import numpy as np
import pytest

from wadiloco.models.config import from_dict
from wadiloco.models.workloads import Arrivals
from wadiloco.sim.fleet import Fleet

NO_REQUESTS = Arrivals(np.zeros(0), np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))


def _fleet(merge: dict | None = None, fleet: dict | None = None, **extra) -> Fleet:
    d = {
        "name": "mitig",
        "horizon_s": 50.0,
        "drain_s": 0.0,
        "fleet": {"islands": 2, "hosts_per_island": 1, **(fleet or {})},
        "merge": merge or {},
        "policy": {"name": "no_sync"},
        "workload": {"kind": "normal"},
        **extra,
    }
    r = from_dict(d)
    return Fleet(r, seed=0, arrivals=[NO_REQUESTS] * r.scenario.fleet.n_sidecars)


def _phase(f: Fleet, phase: str, until: float = 1e4) -> tuple[float, float]:
    """Run one merge phase from t=1 s; (start, end) of the phase."""
    out = {}

    def go():
        yield f.env.timeout(1.0)
        out["start"] = f.env.now
        yield from f.merge.run_phase(phase)
        out["end"] = f.env.now

    f.env.process(go())
    f.env.run(until=until)
    return out.get("start", np.nan), out.get("end", np.nan)


def _cpu_seconds(f: Fleet, kind: str = "ckpt") -> list[float]:
    return [b - a for k, _h, a, b in f.merge.host_work if k == kind]


# one host per island, 1e9 params, 8 bytes/param: an 8 GB (64 Gb) checkpoint shard per host
SHARD_GBITS = 1e9 * 8 * 8 / 1e9


@pytest.mark.parametrize("params,threads", [(1e9, 1), (2e9, 1), (1e9, 4), (5e8, 2)])
def test_serialisation_is_cpu_work_of_bytes_over_rate_times_threads(params, threads):
    f = _fleet({"serialize_threads": threads}, training={"params": params})
    _phase(f, "ckpt")
    expected = SHARD_GBITS * params / 1e9 / (5.6 * threads)
    assert _cpu_seconds(f) == pytest.approx([expected] * 2, rel=1e-9)


def test_serialisation_no_longer_scales_with_wan_bandwidth():
    fast = _fleet()
    slow = _fleet(fleet={"interisland_gbps": 2.5})  # 1.5 Gb/s effective: the write is WAN-bound
    s0, e0 = _phase(fast, "ckpt")
    s1, e1 = _phase(slow, "ckpt")
    assert _cpu_seconds(slow) == pytest.approx(_cpu_seconds(fast), rel=1e-12)
    assert _cpu_seconds(fast) == pytest.approx([SHARD_GBITS / 5.6] * 2, rel=1e-9)
    assert e1 - s1 == pytest.approx(SHARD_GBITS / 1.5, rel=1e-9)  # the write takes longer...
    assert e1 - s1 > 3 * max(_cpu_seconds(slow))  # ...and the CPU is pressed only while it serialises


@pytest.mark.parametrize("threads", [1, 4])
def test_each_thread_presses_on_the_cpu_paths_while_it_serialises(threads):
    from wadiloco.sim.merge import resolve_weights

    f = _fleet({"serialize_threads": threads})
    ser_s = SHARD_GBITS / (5.6 * threads)
    _phase(f, "ckpt", until=1.0 + ser_s / 2)
    w = resolve_weights(f.sc).host_ckpt
    weights = [j.weight for hr in f.res.hosts for c in hr.cpu_paths() for j in c.jobs]
    assert weights == pytest.approx([w * threads] * 2, rel=1e-12)  # one CPU path per host (1 sidecar)
    f.env.run(until=1.0 + ser_s * 1.001)
    assert [j for hr in f.res.hosts for c in hr.cpu_paths() for j in c.jobs] == []
