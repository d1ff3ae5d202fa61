"""The hot path's shortcuts compute exactly what the plain code computes.

* The latency fit: the exact WLS (what simulations use: no statsmodels import, no BLAS) gives
  statsmodels' WLS coefficients, and `wadiloco calibrate` still reports the statsmodels fit.
* models/engine/batching.py: the inlined and searching forms equal the plain closed forms.
* sim/monitor.py Monitor.observe(): the cached pressures, learner signals and merge duration, and the
  inlined queue/running counts, equal a from-scratch computation at every decision of runs with
  merges, and the monitor's arrival/queue samples equal a from-scratch count.

Correctness only; speed lives in `python -m wadiloco.benchmarks`.
"""

from __future__ import annotations

import dataclasses
import math
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from wadiloco.models.engine import batching
from wadiloco.models.engine.latency import LatencyModel, default_latency, design_rows, fit_latency, load_calibration
from wadiloco.models.policies.base import LearnerSignals, Observation
from wadiloco.models.spec.load import load_scenario, with_overrides

ROOT = Path(__file__).resolve().parents[2]


# ---- latency fit -----------------------------------------------------------------------------


def _perturbed(cal: dict, rng: np.random.Generator) -> dict:
    cal = {"latency_model": {k: [dict(r) for r in v] for k, v in cal["latency_model"].items()}}
    for rows in cal["latency_model"].values():
        for r in rows:
            r["p50_ms"] *= float(np.exp(rng.normal(0, 0.1)))
    return cal


@pytest.mark.parametrize("perturb", [None, 1, 2, 3])
def test_exact_wls_matches_statsmodels(perturb):
    import statsmodels.api as sm

    cal = load_calibration()
    if perturb is not None:
        cal = _perturbed(cal, np.random.default_rng(perturb))
    X, y = design_rows(cal)
    want = sm.WLS(y, X, weights=1.0 / y**2).fit().params
    sm_fit, np_fit = fit_latency(cal, method="statsmodels"), fit_latency(cal, method="exact")
    got = np.array([np_fit.a, np_fit.b, np_fit.c, np_fit.d])
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=0)
    np.testing.assert_allclose([sm_fit.a, sm_fit.b, sm_fit.c, sm_fit.d], want, rtol=0, atol=0)
    assert np_fit.r2 == pytest.approx(sm_fit.r2, rel=1e-12)
    assert np_fit.max_rel_err == pytest.approx(sm_fit.max_rel_err, rel=1e-9)


def test_default_latency_is_the_statsmodels_fit():
    a, b = default_latency(), fit_latency()
    for f in dataclasses.fields(LatencyModel):
        if f.name == "form":
            assert a.form == b.form == "linear"
            continue
        assert getattr(a, f.name) == pytest.approx(getattr(b, f.name), rel=1e-12), f.name


def test_calibrate_reports_the_statsmodels_fit(monkeypatch):
    import statsmodels.api as sm

    calls = []
    real = sm.WLS
    monkeypatch.setattr(sm, "WLS", lambda *a, **k: calls.append(1) or real(*a, **k))
    from wadiloco.experiments.cli import main

    assert main(["calibrate", "--json"]) == 0
    assert calls, "wadiloco calibrate must fit with statsmodels"
    with pytest.raises(ValueError):
        fit_latency(method="nope")


def test_a_run_does_not_import_statsmodels():
    code = (
        "import sys\nfrom wadiloco.models.spec.load import load_scenario, with_overrides\n"
        "from wadiloco.experiments.runner import run_one\n"
        "sc = with_overrides(load_scenario('scenarios/normal.yaml'), {'horizon_s': 5.0, 'drain_s': 1.0})\n"
        "run_one(sc, 0)\nprint('statsmodels' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# ---- batching closed forms -------------------------------------------------------------------


def _run_time_general(k, g0, dg, h):
    """models.engine.batching.run_time as first written: host-bound count, then the series."""
    if k <= 0:
        return 0.0
    m = 0 if h <= g0 else k if dg <= 0 else min(k, math.ceil((h - g0) / dg))
    if m and h <= g0 + (m - 1) * dg:
        m -= 1
    return m * h + (k - m) * g0 + dg * (k * (k - 1) / 2 - m * (m - 1) / 2)


def _guess_general(t, g0, dg, h):
    """models.engine.batching._guess as first written: in Python integers, floor division, unclamped."""
    m_all = batching.host_bound_count(10**12, g0, dg, h)
    if t <= m_all * h:
        return int(t // h) if h > 0 else 0
    t2, base = t - m_all * h, g0 + m_all * dg
    if dg <= 0:
        return m_all + (int(t2 // base) if base > 0 else 0)
    bq = base - dg / 2
    return m_all + max(0, int((-bq + math.sqrt(bq * bq + 2 * dg * t2)) / dg))


def _iters_within_general(t, g0, dg, h, kmax):
    k = min(kmax, max(0, _guess_general(t, g0, dg, h)))
    while k < kmax and _run_time_general(k + 1, g0, dg, h) <= t:
        k += 1
    while k > 0 and _run_time_general(k, g0, dg, h) > t:
        k -= 1
    return k


def _iters_to_reach_general(t, g0, dg, h, kmax):
    k = _iters_within_general(t, g0, dg, h, kmax)
    if _run_time_general(k, g0, dg, h) < t:
        k += 1
    return max(1, min(k, kmax))


def test_batching_fast_forms_are_exact():
    """run_time (host-bound count inlined, GPU-bound shortcut), reach and split (one search that
    keeps the run times it computes) equal the plain forms bit for bit."""
    rnd = random.Random(7)
    checked = 0
    for _ in range(50_000):
        g0 = rnd.choice([rnd.uniform(0, 0.01), rnd.randint(0, 8) / 256, 0.0039458 + rnd.random() * 1e-3])
        dg = rnd.choice([0.0, rnd.uniform(0, 1e-5), rnd.randint(0, 4) / 2**13, 3.17e-8 * rnd.randint(1, 256)])
        h = rnd.choice([0.0, 0.0049, rnd.uniform(0, 0.02), rnd.randint(0, 8) / 256])
        k = rnd.randint(0, 3000)
        rt = _run_time_general(k, g0, dg, h)
        assert batching.run_time(k, g0, dg, h) == rt  # bit for bit
        if k >= 1 and (g0 > 0 or dg > 0 or h > 0):
            # arbitrary targets, and targets exactly on a boundary
            t = (
                rnd.uniform(1e-9, rt * 1.2 + 1e-3)
                if rnd.random() < 0.7
                else _run_time_general(rnd.randint(1, k), g0, dg, h)
            )
            want = _iters_to_reach_general(t, g0, dg, h, k)
            assert batching.reach(t, g0, dg, h, k) == (want, _run_time_general(want, g0, dg, h))
            done = _iters_within_general(t, g0, dg, h, k)
            assert batching.split(t, g0, dg, h, k) == (done, t - _run_time_general(done, g0, dg, h))
            checked += 1
    assert checked > 10_000


# ---- observe() and the monitor ---------------------------------------------------------------


def _reference_observation(fleet, step) -> Observation:
    """observe() computed from scratch, without caches or inlining: queue and batch sizes from the
    per-request times (arrived - admitted, admitted - finished), arrival counts from the timeline."""
    now = fleet.env.now
    tr, mon = fleet.trainer, fleet.monitor
    last = tr.last_merge_step
    signals = []
    for k in tr.island_step:
        stale = max(0, k - last)
        signals.append(
            LearnerSignals(
                fleet.progress.dloss_if_merged(stale) / len(tr.island_step),
                stale * fleet.spec.training.tokens_per_step,
                stale,
            )
        )
    counts = np.asarray(mon.tl["arrivals"], dtype=float)
    n = max(1, int(round(fleet.spec.monitor.pressure_window_s / mon.bin_s)))
    recent = counts[-n:]
    rate = float(recent.sum() / (len(recent) * mon.bin_s)) if len(recent) else 0.0
    admitted = [int(np.count_nonzero(~np.isnan(s.admitted))) for s in fleet.sidecars]
    finished = [int(np.count_nonzero(~np.isnan(s.finish))) for s in fleet.sidecars]
    queue = sum(int(np.searchsorted(s.t_arr, now, side="right")) - a for s, a in zip(fleet.sidecars, admitted))
    running = sum(a - f for a, f in zip(admitted, finished))
    cap_total = (fleet.capacity_rps or 0.0) * len(fleet.sidecars)
    slots = max(1, fleet.spec.engine.max_num_seqs * len(fleet.sidecars))
    occ = [(q + r) / slots for q, r in zip(mon.tl["queue"][-n:], mon.tl["running"][-n:])]
    p_srv = min(1.0, max(rate / cap_total if cap_total > 0 else 0.0, float(sum(occ) / len(occ)) if occ else 0.0))

    def window_mean(key):
        xs = mon.tl[key][-n:]
        return float(sum(xs) / len(xs)) if xs else 0.0

    done = [m for m in tr.merges if m.end > 0]
    return Observation(
        now=now,
        step=step,
        last_merge_step=last,
        merges=len(done),
        h_min=fleet.spec.monitor.h_min,
        h_max=fleet.spec.monitor.h_max,
        step_time_s=fleet.spec.training.step_time_s,
        learners=tuple(signals),
        p_net=min(1.0, window_mean("p_net")),
        p_srv=p_srv,
        p_ckpt=min(1.0, window_mean("p_ckpt")),
        queue_len=queue,
        running=running,
        bin_s=mon.bin_s,
        arrival_counts=counts,
        merge_duration_s=float(np.mean([m.duration for m in done])) if done else 0.0,
    )


@pytest.mark.parametrize(
    "name,policy,params",
    [
        ("bursty", "wa_diloco", {}),
        ("pressure_heavy", "fixed", {"H": 64}),
        ("sustained_sync_heavy", "online_forecast", {}),
    ],
)
def test_observe_equals_a_fresh_computation(name, policy, params):
    from wadiloco.models.spec.resolve import resolve
    from wadiloco.sim.fleet import Fleet

    sc = with_overrides(
        load_scenario(ROOT / "scenarios" / f"{name}.yaml"), {"horizon_s": 240.0, "drain_s": 20.0, "merge.h_min": 32}
    )
    fleet = Fleet(resolve(sc, policy, params), 3, plan_ahead=False)  # (fixed observes at every step too)
    real = fleet.monitor.observe
    seen = []

    def checked(step):
        got, want = real(step), _reference_observation(fleet, step)
        for f in dataclasses.fields(Observation):
            a, b = getattr(got, f.name), getattr(want, f.name)
            if isinstance(b, np.ndarray):
                assert np.array_equal(a, b), f.name
            else:
                assert a == b or (isinstance(b, float) and math.isnan(a) and math.isnan(b)), (f.name, a, b)
        seen.append(got)
        return got

    fleet.monitor.observe = checked
    res = fleet.run()
    assert len(seen) > 300 and res.summary["merges"] >= 1
    assert any(o.p_srv > 0 for o in seen) and any(o.queue_len > 0 or o.running > 0 for o in seen)
    # the monitor's samples, from scratch (the run's timeline, filled when read)
    t = res.timeline["t"]
    arr = np.concatenate([a.t for a in fleet.arrivals])
    arrived = np.searchsorted(np.sort(arr), t, side="right")
    assert np.array_equal(np.cumsum(res.timeline["arrivals"]), arrived)


# ---- sim/engine.py Sidecar.speeds ------------------------------------------------------------------


@pytest.mark.parametrize("extra", [{}, {"fleet.colocation": "same_gpu"}], ids=["same_host", "same_gpu"])
def test_cached_speeds_equal_a_fresh_computation(monkeypatch, extra):
    """An engine asks its speeds at every step while merge work presses on its links; the answer is
    kept per fabric generation. At every call it equals the uncached answer, most calls are answered
    from the cache, and a run without the cache gives the same requests."""
    from wadiloco.models.spec.resolve import resolve
    from wadiloco.sim import engine
    from wadiloco.sim.fleet import Fleet

    sc = with_overrides(load_scenario(ROOT / "scenarios" / "bursty.yaml"), {"horizon_s": 200, "drain_s": 20, **extra})
    calls = {"asked": 0, "computed": 0}
    cached, fresh = engine.Sidecar.speeds, engine.hold_share

    def counted_hold_share(*a, **k):
        calls["computed"] += 1
        return fresh(*a, **k)

    def checked(self):
        calls["asked"] += 1
        got = cached(self)
        fabrics, self._fabrics = self._fabrics, None  # (no cache: computed from the links' jobs)
        assert cached(self) == got
        self._fabrics = fabrics
        return got

    monkeypatch.setattr(engine.Sidecar, "speeds", checked)
    a = Fleet(resolve(sc), 1).run()
    monkeypatch.setattr(engine, "hold_share", counted_hold_share)
    monkeypatch.setattr(engine.Sidecar, "speeds", cached)
    f = Fleet(resolve(sc), 1)
    b = f.run()
    with_cache = calls["computed"]
    calls["computed"] = 0
    f = Fleet(resolve(sc), 1)
    for s in f.sidecars:
        s._fabrics = None
    c = f.run()
    assert a.summary["merges"] >= 1 and calls["asked"] > 200
    assert with_cache * 10 < calls["computed"]
    for k in a.requests:
        for other in (b, c):
            assert np.array_equal(a.requests[k], other.requests[k], equal_nan=a.requests[k].dtype.kind == "f"), k


# ---- sim/merge.py next_touch_at: the lookahead during a merge -------------------------------------------

MERGE_CASES = {
    "same_host": {},
    "same_gpu": {"fleet.colocation": "same_gpu"},  # the outer step shares the serving GPU: shared steps
    "async_ckpt": {"merge.checkpoint_mode": "async"},  # a background write after the merge
    "host_codec": {"merge.compression": "int8", "merge.compression_on": "host"},  # fixed-duration CPU passes
    "streaming": {"merge.fragments": 4},  # fragments start at their own instants while islands step
}


@pytest.mark.parametrize("extra", list(MERGE_CASES.values()), ids=list(MERGE_CASES))
def test_engines_run_ahead_during_a_merge_to_its_next_completion(monkeypatch, extra):
    """While merge work is on the links the engines book iterations up to the merge's next job
    completion or fixed-duration end (MergeExecutor.next_touch_at), where they once yielded at every
    step (the source said -inf): the same requests, timeline and merges, with fewer SimPy events."""
    from wadiloco.models.spec.resolve import resolve
    from wadiloco.sim import merge
    from wadiloco.sim.fleet import Fleet

    over = {"horizon_s": 120, "drain_s": 10, "merge.h_min": 16, "merge.h_max": 64, "policy.params.H": 40}
    sc = with_overrides(load_scenario(ROOT / "scenarios" / "bursty.yaml"), {**over, **extra})

    def run():
        f = Fleet(resolve(sc), 3, check=True)  # (check: no engine is ever ahead of an observation)
        res = f.run()
        return res, next(f.env._eid)

    a, events = run()
    bounded = merge.MergeExecutor.next_touch_at

    def unbounded(self):
        t = bounded(self)
        return -math.inf if self.active or self.ckpt.busy or self._running else t

    monkeypatch.setattr(merge.MergeExecutor, "next_touch_at", unbounded)
    b, events_before = run()
    assert a.summary["merges"] >= 2
    for k in a.requests:
        assert np.array_equal(a.requests[k], b.requests[k], equal_nan=a.requests[k].dtype.kind == "f"), k
    for k in a.timeline:
        assert np.array_equal(a.timeline[k], b.timeline[k]), k
    assert [(m.start, m.end, m.phases) for m in a.merges] == [(m.start, m.end, m.phases) for m in b.merges]
    assert events < events_before
