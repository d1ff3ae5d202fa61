"""Checkpoint serialisation as CPU work, and the training-side mitigations.

Most cases run one merge phase directly on a fleet's `MergeExecutor` (as sim.probe does) so they
cost milliseconds; `host_work` records when each host's merge CPU work pressed on its CPU paths.
"""

from __future__ import annotations

import numpy as np
import pytest

from wadiloco.models.spec.load import scenario_from_dict
from wadiloco.models.spec.resolve import from_dict
from wadiloco.models.workload.kinds import Arrivals
from wadiloco.sim.fleet import Fleet, simulate

NO_REQUESTS = Arrivals(np.zeros(0), np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))


def _fleet(merge: dict | None = None, fleet: dict | None = None, **extra) -> Fleet:
    d = {
        "name": "mitig",
        "horizon_s": 50.0,
        "drain_s": 0.0,
        # the WAN at a fixed efficiency (0.6, an override of `auto`), so uplink rates read off simply
        "fleet": {"islands": 2, "hosts_per_island": 1, "wan_efficiency": 0.6, **(fleet or {})},
        "merge": merge or {},
        "policy": {"name": "no_sync"},
        "workload": {"kind": "normal"},
        **extra,
    }
    r = from_dict(d)
    return Fleet(r, seed=0, arrivals=[NO_REQUESTS] * r.fleet.n_sidecars)


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
    f = _fleet({"serialize_threads": threads})
    ser_s = SHARD_GBITS / (5.6 * threads)
    _phase(f, "ckpt", until=1.0 + ser_s / 2)
    w = f.spec.merge.weights.host_ckpt
    weights = [j.weight for hr in f.res.hosts for c in hr.cpu_paths() for j in c.jobs]
    assert weights == pytest.approx([w * threads] * 2, rel=1e-12)  # one CPU path per host (1 sidecar)
    f.env.run(until=1.0 + ser_s * 1.001)
    assert [j for hr in f.res.hosts for c in hr.cpu_paths() for j in c.jobs] == []


# ---- asynchronous checkpointing (PyTorch DCP's async_save) ------------------------------------
STAGE_S = SHARD_GBITS / 440  # the blocking part: the shard to pinned host memory over PCIe


def test_async_merge_waits_only_for_the_staging_and_the_write_continues_behind():
    f = _fleet({"checkpoint_mode": "async"}, fleet={"interisland_gbps": 2.5})  # a WAN-bound write
    start, end = _phase(f, "ckpt", until=2.0)
    assert end - start == pytest.approx(STAGE_S, rel=1e-9)  # training resumes after the staging
    # the write is still on the links: it bounds the engines' lookahead at its next completion
    nxt = f.res.next_timer_at()
    assert f.merge.ckpt.busy and f.env.now < nxt < float("inf") and f.merge.next_touch_at() == nxt
    f.env.run(until=1e4)
    assert not f.merge.ckpt.busy
    # the background's host pressure starts when the staging ends and lasts its work, not the write
    work = [(a, b) for k, _h, a, b in f.merge.host_work if k == "ckpt"]
    assert [a for a, _ in work] == pytest.approx([end] * 2, rel=1e-12)
    assert [b - a for a, b in work] == pytest.approx([SHARD_GBITS / 5.6] * 2, rel=1e-9)


def test_async_save_waits_for_the_one_in_flight():
    f = _fleet({"checkpoint_mode": "async"}, fleet={"interisland_gbps": 2.5})
    out = []

    def two():
        yield f.env.timeout(1.0)
        for _ in range(2):
            t0 = f.env.now
            yield from f.merge.run_phase("ckpt")
            out.append((t0, f.env.now))

    f.env.process(two())
    f.env.run(until=1e4)
    (a0, b0), (a1, b1) = out
    assert a1 == b0  # back to back, but the second staging starts only once the first write is done
    write_s = SHARD_GBITS / 1.5  # 64 Gb per host over a 1.5 Gb/s effective uplink
    assert b1 - a1 == pytest.approx(write_s + STAGE_S, rel=1e-9)


# ---- staggered checkpoint writes ----------------------------------------------------------------
@pytest.mark.parametrize("k,overlap", [(None, True), (2, True), (1, False)])
def test_at_most_k_hosts_serialise_and_write_at_once(k, overlap):
    f = _fleet({"checkpoint_stagger": k})
    start, end = _phase(f, "ckpt")
    work = sorted((a, b) for kind, _h, a, b in f.merge.host_work if kind == "ckpt")
    ser = SHARD_GBITS / 5.6
    assert [b - a for a, b in work] == pytest.approx([ser] * 2, rel=1e-9)
    if overlap:
        assert work[0][0] == work[1][0] and end - start == pytest.approx(ser, rel=1e-9)
    else:  # one at a time: the second host starts when the first is done
        assert work[1][0] == pytest.approx(work[0][1], rel=1e-12)
        assert end - start == pytest.approx(2 * ser, rel=1e-9)


# ---- Streaming DiLoCo ---------------------------------------------------------------------------
def _record_work(monkeypatch) -> dict:
    from wadiloco.sim.fabric import Fabric

    totals: dict = {}
    real = Fabric.start

    def counting(self, links, work, weight=1.0, max_rate=float("inf"), tag=None):
        if isinstance(tag, tuple) and tag[0] == "merge" and work != float("inf"):
            totals[tag[1]] = totals.get(tag[1], 0.0) + work
        return real(self, links, work, weight, max_rate, tag)

    monkeypatch.setattr(Fabric, "start", counting)
    return totals


def _round(f: Fleet) -> list:
    from wadiloco.sim.training import MergeRecord

    rec = MergeRecord(0, 128, 1.0)

    def go():
        yield f.env.timeout(1.0)
        rec.start = f.env.now
        yield from f.merge.stream_round(rec, f.spec.merge.phases, f.spec.training.step_time_s)
        rec.end = f.env.now

    f.env.process(go())
    f.env.run(until=1e4)
    return rec


@pytest.mark.parametrize("fragments", [2, 4, 7])
def test_streaming_fragments_partition_the_model(monkeypatch, fragments):
    totals = _record_work(monkeypatch)
    _round(_fleet())  # one unfragmented round through the same path
    whole = dict(totals)
    totals.clear()
    rec = _round(_fleet({"fragments": fragments, "fragment_offset_steps": 4}))
    assert set(totals) == set(whole) == {"stage", "allreduce", "outer", "serialize", "ckpt"}
    for kind, work in whole.items():  # every byte (and every element of the outer step) once
        assert totals[kind] == pytest.approx(work, rel=1e-12), kind
    # fragment p starts p x 4 steps (0.5 s each) after the round: the round spans them
    assert rec.end - rec.start >= (fragments - 1) * 4 * 0.5


def _run(merge: dict, unlimited=(), **kw):
    """(the run with fixed H=48, the same fleet's no_sync run) on seed 2."""
    sc = _run_sc(merge, unlimited)
    return simulate(sc, 2, check=True, **kw), simulate(sc, 2, "no_sync", {}, check=True)


def _run_sc(merge: dict, unlimited=()):
    d = {
        "name": "mitig-run",
        "horizon_s": 120,
        "drain_s": 30,
        "fleet": {"islands": 2, "hosts_per_island": 1, "colocation": "same_gpu", "unlimited": list(unlimited)},
        "engine": {"cuda_graphs": False},
        "merge": {"h_min": 32, "h_max": 64, **merge},
        "workload": {"kind": "normal", "load": 0.6},
        "policy": {"name": "fixed", "params": {"H": 48}},
    }
    return scenario_from_dict(d)


def test_streaming_rounds_overlap_inner_steps():
    plain, streamed = simulate(_run_sc({}), 2), simulate(_run_sc({"fragments": 4}), 2)
    ms = streamed.merges
    assert len(ms) >= 2
    assert all(m.start == m.decided_at for m in ms)  # no barrier: the round starts at the decision
    # the islands never wait, so they take more inner steps in the same horizon
    assert streamed.summary["inner_steps"] > plain.summary["inner_steps"]


MITIGATIONS = [
    {"checkpoint_mode": "async"},
    {"checkpoint_stagger": 1},
    {"fragments": 4},
    {"compression": "int8"},
    {"compression": "int4", "compression_on": "host"},
]


@pytest.mark.parametrize("merge", MITIGATIONS, ids=lambda m: ",".join(f"{k}={v}" for k, v in m.items()))
def test_each_mitigation_presses_only_through_gpu_and_host(merge):
    """Emergence: with GPU and host unlimited every request's times equal the no-merge run's; with
    them limited the mitigation's merges still slow serving (so the test can fail both ways)."""
    merged, alone = _run(merge)
    assert merged.summary["merges"] >= 2 and merged.summary["contended_iterations"] > 0
    merged_u, alone_u = _run(merge, ("gpu", "host"))
    assert merged_u.summary["merges"] >= 2
    for col in ("first_token", "finish"):
        np.testing.assert_allclose(merged_u.requests[col], alone_u.requests[col], rtol=0, atol=1e-9)


# ---- compressed pseudo-gradients ----------------------------------------------------------------
@pytest.mark.parametrize("codec,ratio", [("int8", 0.5), ("int4", 0.25)])
def test_compression_shrinks_the_allreduce_for_two_passes_of_codec_work(monkeypatch, codec, ratio):
    totals = _record_work(monkeypatch)
    plain = _fleet(merge={"phases": ["allreduce"]})
    s0, e0 = _phase(plain, "allreduce")
    bf16 = totals.pop("allreduce")
    comp = _fleet(merge={"phases": ["allreduce"], "compression": codec})
    s1, e1 = _phase(comp, "allreduce")
    assert totals["allreduce"] == pytest.approx(bf16 * ratio, rel=1e-12)
    elements = 1e9  # one host per island holds the whole model
    codec_s = elements / 4.0e10  # on the learner GPU, alone there
    assert totals["quantise"] == totals["dequantise"] == pytest.approx(2 * codec_s, rel=1e-12)  # 2 hosts
    lat = plain.spec.merge.ring_wait_s  # per call, whatever its bytes
    assert e1 - s1 == pytest.approx((e0 - s0 - lat) * ratio + lat + 2 * codec_s, rel=1e-9)


def test_host_compression_presses_on_the_cpu_for_its_work():
    f = _fleet({"phases": ["allreduce"], "compression": "int8", "compression_on": "host"})
    _phase(f, "allreduce")
    work = [b - a for k, _h, a, b in f.merge.host_work if k == "codec"]
    assert work == pytest.approx([1e9 / 2.5e8] * 4, rel=1e-9)  # 2 hosts x (quantise, dequantise)


@pytest.mark.parametrize(
    "merge",
    [
        {"fragments": 3, "fragment_offset_steps": 5},
        {"checkpoint_mode": "async", "checkpoint_stagger": 1, "compression": "int4", "compression_on": "host"},
    ],
    ids=["streaming", "async+stagger+int4"],
)
def test_lookahead_on_and_off_give_identical_runs(merge):
    """The merge executor bounds how far engines run ahead (a background save, a fragment to come)."""
    sc = _run_sc(merge)
    on, off = simulate(sc, 2), simulate(sc, 2, lookahead=False)
    for col in ("admitted", "first_token", "finish"):
        np.testing.assert_array_equal(on.requests[col], off.requests[col])
    assert [m.end for m in on.merges] == [m.end for m in off.merges]
