"""The testbed twin's scenarios (scenarios/testbed/) through the ordinary simulator: Stage 10 in sample
within the issue's acceptance, Stage 12's schedules replayed exactly, invariants on closed loops."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from wadiloco.models.spec.load import load_scenario, with_overrides
from wadiloco.models.testbed import fit, stage12
from wadiloco.sim.fleet import simulate

ROOT = Path(__file__).resolve().parents[2]
TESTBED = ROOT / "scenarios" / "testbed"
# The profile's iteration law covers every run but these (experiments.studies.testbed_table.NOTES says why)
OUT_OF_SAMPLE = {"vllm-1p5b-medium": None, "vllm-1p5b-highcon": 0.03}  # None: not covered at all


def _regime(run: str) -> str:
    return "stage10_" + run.removeprefix("vllm-").replace("-", "_")


@pytest.mark.parametrize("run", [r["name"] for r in fit.stage10()["runs"]])
def test_stage10_in_sample_within_the_acceptance(run):
    res = simulate(load_scenario(TESTBED / f"{_regime(run)}.yaml"), 23, check=True)
    sim, meas = res.summary["testbed"], fit.run_spec(run)["measured"]
    err = {k: abs(sim[k] / meas[k] - 1.0) for k in fit.FIGURES}
    tol = OUT_OF_SAMPLE.get(run, 0.02)
    if tol is None:
        assert err["requests"] > 0.05  # the anomalous run stays unexplained; a fit that "explained" it would be suspect
        return
    assert err["requests"] <= tol
    assert err["p50_ms"] <= 0.05 and err["p95_ms"] <= 0.05
    assert err["sync_ratio"] <= 0.05 and err["high_low_ratio"] <= 0.05


@pytest.mark.parametrize("draw", [None, 0, 3])
def test_stage12_schedules_run_exactly_and_stress_follows_each_merge(draw):
    sc = load_scenario(TESTBED / "stage12_bursty.yaml")
    if draw is None:
        expected = stage12.calibrated_replay()
    else:
        sc = with_overrides(sc, {"policy.params": {"schedule": "stage12_random_matched"}})
        expected = stage12.random_matched(29, draw)
    res = simulate(sc, 29, draw=draw or 0, check=True)
    got = np.array([m.decided_at for m in res.merges])
    assert len(got) == len(expected) and np.all(got >= np.array(expected) - 1e-6)
    assert np.all(got - 0.05 < np.array(expected) - 1e-6)  # the first 50-ms step at or after each start
    on = np.array([a for a, _b in res.cotenant_windows])
    ends = np.array([m.end for m in res.merges])
    assert np.all(on >= ends - 1e-6) and np.all(on - 0.05 < ends)  # stress on at the next poll tick
    assert res.summary["testbed"]["merges"] == len(expected)


def test_no_sync_has_no_stress_and_every_batch_accounted_for():
    sc = with_overrides(load_scenario(TESTBED / "stage12_bursty.yaml"), {"policy": {"name": "no_sync"}})
    res = simulate(sc, 23, check=True)  # check: the closed-loop invariants
    assert res.cotenant_windows == [] and res.summary["testbed"]["slo_pct"] == 0.0


def test_a_sweep_measures_the_merges_effect_on_the_cotenant_windows():
    """Merges that hold nothing act through the co-tenant's window after each merge: a sweep's run
    record measures "overlapping" on those windows (no request overlaps the instant merges), and the
    stressed requests are slower than the rest; on an ordinary scenario overlapping means merges."""
    from wadiloco.experiments.sweep.worker import execute_task
    from wadiloco.models.results import metrics as M

    sc = with_overrides(load_scenario(TESTBED / "stage12_bursty.yaml"), {"horizon_s": 200})
    task = {"scenario": sc, "policy": "replay", "params": {"schedule": "stage12_calibrated_replay"}, "seed": 29}
    out = execute_task({**task, "draw": 0, "reference": None, "baseline": None})
    s = out["summary"]
    assert out["status"] == "ok" and s[M.OVERLAP_WINDOW] == M.COTENANT_WINDOWS and s["merges"] >= 2
    assert s[M.E2E_P95_OVERLAP] > 1.2 * s[M.E2E_P95_NO_OVERLAP]
    plain = with_overrides(load_scenario(ROOT / "scenarios" / "bursty.yaml"), {"horizon_s": 120, "drain_s": 5})
    task = {"scenario": plain, "policy": "fixed", "params": {"H": 128}, "seed": 0, "draw": 0}
    s = execute_task({**task, "reference": None, "baseline": None})["summary"]
    assert s[M.OVERLAP_WINDOW] == M.MERGE_WINDOWS
