"""Engine generations (engine.step: overlapped | sequential), host work that grows with the batch and
the frontend (API server) path: hand-computed step times, the closed forms, where the interference
comes from, and that the defaults leave today's engine (and every scenario digest) as it was.

Fast-forward vs per-iteration, lookahead on/off and the heapq reference for these modes are in
tests/sim/test_queueing.py (SEQUENTIAL, OVERLAPPED_FRONTEND cases)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from wadiloco.benchmarks.harness import run_engine
from wadiloco.models.engine import batching
from wadiloco.models.engine.batching import EngineStep, compose, rest, run_time
from wadiloco.models.engine.capacity import sidecar_capacity_rps
from wadiloco.models.engine.latency import LatencyModel
from wadiloco.models.spec.load import load_scenario, with_overrides
from wadiloco.models.workload.kinds import Arrivals
from wadiloco.sim.fleet import simulate

ROOT = Path(__file__).resolve().parents[2]
A, B, C, D = 2.0**-8, 2.0**-12, 2.0**-16, 2.0**-10
LAT = LatencyModel(A, B, C, D, r2=1.0, n=0, max_rel_err=0.0)


def one_request(prompt: int, output: int, h: float, step: EngineStep, ff: bool = True):
    arr = Arrivals(np.array([0.0]), np.array([prompt]), np.array([output]))
    sc, _ = run_engine(arr, LAT, max_num_seqs=8, max_num_batched_tokens=512, host_s=h, step=step, fast_forward=ff)
    return sc


@pytest.mark.parametrize("h", [2.0**-5, 2.0**-9], ids=["host-bound", "gpu-bound"])
def test_a_single_requests_ttft_is_h_plus_g_or_max(h):
    g = A + B * 64 + D  # the prefill step of one 64-token prompt
    over = one_request(64, 1, h, EngineStep())
    seq = one_request(64, 1, h, EngineStep(sequential=True))
    assert over.first_token[0] == max(h, g)
    assert seq.first_token[0] == h + g
    # host work per sequence and per scheduled token: h0 + h1*1 + h2*64
    h1, h2 = 2.0**-10, 2.0**-14
    hh = h + h1 + h2 * 64
    assert one_request(64, 1, h, EngineStep(True, h1, h2)).first_token[0] == hh + g
    assert one_request(64, 1, h, EngineStep(False, h1, h2)).first_token[0] == max(hh, g)


def test_the_frontend_path_runs_beside_or_after_the_step():
    h, fq, ft = 2.0**-9, 2.0**-5, 2.0**-11
    g = A + B * 64 + D
    f = fq + ft  # one admission, one (first) output token
    assert f > max(h, g)  # the frontend binds the overlapped step
    assert one_request(64, 1, h, EngineStep(False, 0, 0, fq, ft)).first_token[0] == f
    assert one_request(64, 1, h, EngineStep(True, 0, 0, fq, ft)).first_token[0] == h + f + g
    # decode iterations carry ft per token and no admission
    for ff in (True, False):
        sc = one_request(64, 3, h, EngineStep(True, 0, 0, fq, ft), ff)
        decode = [h + ft + (A + C * (65 + i) + D) for i in range(2)]
        assert sc.finish[0] == h + f + g + decode[0] + decode[1]


def test_sequential_runs_are_sums_of_h_plus_g():
    g0, dg, h, f = 2.0**-7, 2.0**-14, 2.0**-6, 2.0**-9
    for k in (1, 7, 40):
        G, H = compose(g0, h, f, True)
        assert run_time(k, G, dg, H) == sum(h + f + g0 + i * dg for i in range(k))
        G, H = compose(g0, h, f, False)
        assert run_time(k, G, dg, H) == sum(max(h, f, g0 + i * dg) for i in range(k))


def test_rest_of_a_cut_iteration_follows_the_order_of_its_parts():
    g, h, f, sp = 2.0**-6, 2.0**-7, 2.0**-8, (1.0, 0.5, 1.0)  # host at half speed: 2^-6 s of it
    assert rest(2.0**-7, g, h, f, sp, True) == (g, h - 2.0**-7 * 0.5, f)  # still scheduling
    assert rest(2.0**-6 + 2.0**-8, g, h, f, sp, True) == (g - 2.0**-8, 0.0, f)  # on the GPU
    assert rest(2.0**-6 + g + 2.0**-9, g, h, f, sp, True) == (0.0, 0.0, f - 2.0**-9)  # output processing
    assert rest(2.0**-8, g, h, f, sp, False) == (g - 2.0**-8, h - 2.0**-9, 0.0)  # all at once; f done


def test_capacity_follows_the_generation():
    kw = dict(mean_prompt=512.0, mean_output=128.0, max_num_batched_tokens=8192)
    h = 0.0049
    over = sidecar_capacity_rps(LAT, 64, h, **kw)
    assert sidecar_capacity_rps(LAT, 64, h, **kw, step=batching.TODAYS_STEP) == over
    seq = sidecar_capacity_rps(LAT, 64, h, **kw, step=EngineStep(sequential=True))
    g = A + B * 64 * 512 / 128 + C * 64 * (512 + 64) + D * 64
    assert over == pytest.approx(64 / (128 * max(h, g)), rel=1e-12)
    assert seq == pytest.approx(64 / (128 * (h + g)), rel=1e-12)


def test_defaults_leave_the_digest_and_new_values_move_it():
    sc = load_scenario(ROOT / "scenarios" / "bursty.yaml")
    d0 = sc.digest()
    same = with_overrides(sc, {"engine.step": "overlapped", "engine.host_per_seq_s": 0.0})
    assert same.digest() == d0
    for k, v in [
        ("engine.step", "sequential"),
        ("engine.host_per_seq_s", 1e-5),
        ("engine.host_per_token_s", 1e-7),
        ("engine.frontend_per_request_s", 1e-4),
        ("engine.frontend_per_token_s", 1e-5),
        ("engine.latency", "attention"),
    ]:
        assert with_overrides(sc, {k: v}).digest() != d0, k


# Host pressure only: no GPU share for staging, the outer step on the learners' GPU (same_host).
HOST_ONLY = {
    "horizon_s": 240.0,
    "drain_s": 60.0,
    "engine.step": "sequential",
    "engine.frontend_per_token_s": 2.0e-5,
    "interference.gpu_stage_weight": 0.0,
    "policy.params": {"H": 64},
    "merge.h_min": 64,
}


def _pair(extra: dict):
    sc = with_overrides(load_scenario(ROOT / "scenarios" / "bursty.yaml"), {**HOST_ONLY, **extra})
    merged = simulate(sc, seed=4)
    quiet = simulate(with_overrides(sc, {"policy.name": "no_sync", "policy.params": {}}), seed=4)
    assert merged.summary["merges"] >= 3 and quiet.summary["merges"] == 0
    return merged.requests, quiet.requests


def test_unlimited_host_removes_the_sequential_engines_merge_interference():
    merged, quiet = _pair({})
    slow = merged["e2e"] - quiet["e2e"]
    assert np.nanmax(slow) > 0.05 and np.nanmean(slow) > 1e-3  # checkpoint CPU work stretches steps
    merged, quiet = _pair({"fleet.unlimited": ["host"]})
    np.testing.assert_allclose(merged["e2e"], quiet["e2e"], rtol=0, atol=1e-9)
