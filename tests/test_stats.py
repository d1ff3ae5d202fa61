"""Statistics and the claim gate: Holm against statsmodels, bootstrap CI coverage, degenerate data,
the paired test, and the verdicts on synthetic runs with known answers."""

from __future__ import annotations

import math

import numpy as np
import pytest

from wadiloco.experiments.stats import (
    CI,
    bootstrap_mean_ci,
    bootstrap_ratio_of_means_ci,
    envelope,
    holm,
    paired_wilcoxon,
)
from wadiloco.experiments.sweep import Plan


def test_holm_matches_statsmodels(monkeypatch):
    import gc

    from statsmodels.stats.multitest import multipletests

    # every holm call of multipletests runs gc.collect(), up to a second each in a full suite's heap
    monkeypatch.setattr(gc, "collect", lambda *a: 0)
    rng = np.random.default_rng(3)
    for k in (1, 2, 5, 12):
        for _ in range(2):
            p = rng.uniform(0, 0.2, size=k) ** rng.uniform(0.5, 3)
            np.testing.assert_allclose(holm(p), multipletests(p, method="holm")[1], rtol=0, atol=1e-15)
    # NaNs are left out of the family and stay NaN
    p = np.array([0.01, np.nan, 0.04, 0.03])
    ref = multipletests([0.01, 0.04, 0.03], method="holm")[1]
    out = holm(p)
    assert math.isnan(out[1])
    np.testing.assert_allclose(out[[0, 2, 3]], ref)
    assert np.isnan(holm([np.nan, np.nan])).all()
    # a hand-checked case: sorted 0.01, 0.02, 0.04 -> 0.03, 0.04, 0.04
    np.testing.assert_allclose(holm([0.04, 0.01, 0.02]), [0.04, 0.03, 0.04])


@pytest.mark.parametrize("method", ["BCa", "percentile"])
def test_bootstrap_ci_coverage_is_near_nominal(method):
    """300 synthetic data sets with a known mean: the 95% CI must cover it in 90-99% of them."""
    rng = np.random.default_rng(2026)
    true_mean, reps, hits, widths = 0.3, 300, 0, []
    for i in range(reps):
        x = rng.normal(true_mean, 1.0, size=30)
        ci = bootstrap_mean_ci(x, confidence=0.95, n_resamples=999, method=method, rng=np.random.default_rng(i))
        hits += ci.low <= true_mean <= ci.high
        widths.append(ci.high - ci.low)
    cover = hits / reps
    assert 0.90 <= cover <= 0.99, cover
    # and the width is what a t-interval would give (about 2 * 1.96 / sqrt(30) = 0.72)
    assert 0.6 < float(np.mean(widths)) < 0.8


def test_bootstrap_ci_coverage_skewed_data():
    rng = np.random.default_rng(7)
    hits = 0
    for i in range(300):
        x = rng.exponential(2.0, size=40)
        ci = bootstrap_mean_ci(x, n_resamples=999, rng=np.random.default_rng(i))
        hits += ci.low <= 2.0 <= ci.high
    assert 0.88 <= hits / 300 <= 0.99


def test_bootstrap_is_deterministic_given_the_generator():
    x = np.random.default_rng(1).normal(size=12)
    a = bootstrap_mean_ci(x, n_resamples=500, rng=np.random.default_rng(5))
    b = bootstrap_mean_ci(x, n_resamples=500, rng=np.random.default_rng(5))
    c = bootstrap_mean_ci(x, n_resamples=500, rng=np.random.default_rng(6))
    assert a == b and a != c


def test_degenerate_data_does_not_crash():
    assert bootstrap_mean_ci([0.0, 0.0, 0.0]) == CI(0.0, 0.0, 0.0, 3, "constant data: point interval")
    one = bootstrap_mean_ci([0.7])
    assert one.mean == 0.7 and math.isnan(one.low) and one.n == 1 and "n < 2" in one.note
    empty = bootstrap_mean_ci([])
    assert math.isnan(empty.mean) and empty.n == 0
    nan_only = bootstrap_mean_ci([np.nan, np.inf])
    assert nan_only.n == 0
    # a single non-zero value among zeros: BCa may degenerate, the interval still brackets the mean
    ci = bootstrap_mean_ci([0, 0, 0, 0, 0, 0, 0, 1.0], n_resamples=500, rng=np.random.default_rng(0))
    assert math.isfinite(ci.low) and ci.low <= ci.mean <= ci.high
    r = bootstrap_ratio_of_means_ci([1, 2], [0, 0])
    assert math.isnan(r.mean)
    r = bootstrap_ratio_of_means_ci([2.0, 2.0, 2.0], [1.0, 1.0, 1.0], n_resamples=200)
    assert r.mean == 2.0
    assert CI(float("nan"), float("nan"), float("nan"), 0).fmt() == "n/a"


def test_ratio_of_means_ci_covers_true_ratio():
    rng = np.random.default_rng(11)
    hits = 0
    for i in range(150):
        den = rng.normal(10, 1, size=25)
        num = 1.3 * den + rng.normal(0, 0.5, size=25)
        ci = bootstrap_ratio_of_means_ci(num, den, n_resamples=500, rng=np.random.default_rng(i))
        hits += ci.low <= 1.3 <= ci.high
    assert 0.88 <= hits / 150 <= 1.0


def test_paired_wilcoxon():
    from scipy import stats

    assert paired_wilcoxon([0, 0, 0, 0]) == (1.0, "all differences zero: p = 1")
    p, note = paired_wilcoxon([0.5])
    assert math.isnan(p) and "n=1" in note
    d = np.random.default_rng(4).normal(0.3, 1, size=20)
    assert paired_wilcoxon(d)[0] == pytest.approx(stats.wilcoxon(d).pvalue)
    assert paired_wilcoxon(np.r_[d, np.nan])[0] == pytest.approx(stats.wilcoxon(d).pvalue)
    # every one of 6 pairs favours the same side: exact two-sided p = 2 / 2**6
    assert paired_wilcoxon([-1, -2, -3, -4, -5, -6])[0] == pytest.approx(2 / 64)


def test_envelope():
    x = np.arange(1001, dtype=float)
    assert envelope(x) == (25.0, 975.0)
    assert envelope([np.nan, 1.0], 0, 100) == (1.0, 1.0)
    assert all(math.isnan(v) for v in envelope([]))


# ---- the claim gate on synthetic runs ----------------------------------------------------------


def _plan(n_seeds=8, draws=5):
    arms = [
        {
            "label": "no_sync",
            "name": "no_sync",
            "params": {},
            "params_hash": "b",
            "draws": 1,
            "role": "baseline",
            "reference": None,
        },
        {
            "label": "smart",
            "name": "wa_diloco",
            "params": {},
            "params_hash": "s",
            "draws": 1,
            "role": "policy",
            "reference": None,
        },
        {
            "label": "dumb",
            "name": "fixed",
            "params": {},
            "params_hash": "d",
            "draws": 1,
            "role": "policy",
            "reference": None,
        },
        {
            "label": "oracle",
            "name": "offline_calibrated",
            "params": {},
            "params_hash": "o",
            "draws": 1,
            "role": "policy",
            "reference": "smart",
        },
        {
            "label": "mr[smart]",
            "name": "matched_random",
            "params": {},
            "params_hash": "m",
            "draws": draws,
            "role": "control",
            "reference": "smart",
        },
    ]
    return {
        "regimes": [{"name": "r", "scenario_hash": "h"}],
        "arms": arms,
        "seeds": list(range(n_seeds)),
        "timeline_seed": 0,
        "bootstrap": {"n_resamples": 500, "confidence": 0.95, "method": "BCa", "seed": 0},
        "gate": {"alpha": 0.05, "min_p95_ratio": 1.05, "transfer": "matched", "envelope": [2.5, 97.5]},
    }


def _runs(plan, rate: dict, slow=1.5, hashes=None, rng_seed=0):
    """rate[label](seed, draw) -> violation rate; merging runs slow overlapping requests by `slow`."""
    from wadiloco.experiments.protocol import runs_table

    rng = np.random.default_rng(rng_seed)
    rows = []
    for arm in plan["arms"]:
        for s in plan["seeds"]:
            for d in range(arm["draws"]):
                merging = arm["role"] != "baseline"
                base = 2.0 + rng.normal(0, 0.05)
                rows.append(
                    {
                        "scenario_hash": "h",
                        "policy_label": arm["label"],
                        "params_hash": arm["params_hash"],
                        "seed": s,
                        "draw": d,
                        "status": "ok",
                        "error": None,
                        "reference": None,
                        "attempts": 1,
                        "summary": {
                            "requests": 1000,
                            "completed": 1000,
                            "slo_violations": int(rate[arm["label"]](s, d) * 1000),
                            "slo_violation_rate": rate[arm["label"]](s, d),
                            "merges": 3 if merging else 0,
                            "inner_steps": 1000,
                            "final_loss": 3.0,
                            "arrivals_hash": (hashes or {}).get((arm["label"], s), f"a{s}"),
                            "e2e_p95_overlap_s": 2.5 if merging else None,
                            "e2e_p95_no_overlap_s": 2.0,
                            "e2e_p95_overlap_matched_s": base * slow if merging else None,
                            "e2e_p95_overlap_baseline_s": base if merging else None,
                        },
                    }
                )
    return runs_table(Plan.from_dict(plan), rows)


def _verdicts(plan, runs):
    from wadiloco.experiments.protocol import analyse

    res = analyse(Plan.from_dict(plan), runs)
    return res["summary"].set_index("policy"), res


def test_claim_gate_demonstrated_when_everything_holds():
    plan = _plan()
    rng = np.random.default_rng(1)
    noise = {s: rng.normal(0, 0.002) for s in plan["seeds"]}
    rate = {
        "no_sync": lambda s, d: 0.02 + noise[s],
        "smart": lambda s, d: 0.03 + noise[s] + 0.001 * (s % 3),
        "dumb": lambda s, d: 0.05 + noise[s] + 0.001 * (s % 2),
        "oracle": lambda s, d: 0.025 + noise[s] + 0.0005 * (s % 4),
        "mr[smart]": lambda s, d: 0.045 + noise[s] + 0.002 * ((s * 7 + d * 3) % 5),
    }
    s, res = _verdicts(plan, _runs(plan, rate))
    assert s.loc["smart", "verdict"] == "demonstrated"
    assert s.loc["oracle", "verdict"] == "demonstrated"  # spends smart's budget: paired with mr[smart]
    assert s.loc["oracle", "matched_control"] == "mr[smart]"
    assert s.loc["dumb", "verdict"].startswith("not demonstrated: no matched-random control")
    assert s.loc["no_sync", "verdict"].startswith("n/a") and s.loc["mr[smart]", "verdict"].startswith("n/a")
    assert s.loc["smart", "sync_excess_mean"] == pytest.approx(0.01 + 0.001 * np.mean([x % 3 for x in range(8)]))
    assert (
        s.loc["smart", "sync_excess_ci_low"]
        <= s.loc["smart", "sync_excess_mean"]
        <= s.loc["smart", "sync_excess_ci_high"]
    )
    lo, hi = s.loc["smart", "mr_envelope_low"], s.loc["smart", "mr_envelope_high"]
    assert lo < hi and lo >= 0.02 and hi <= 0.034
    comps = res["comparisons"]
    assert len(comps) == 2
    np.testing.assert_allclose(comps["p_holm"], holm(comps["p_value"]))
    assert bool(s.loc["smart", "effect_transfers"]) and s.loc["smart", "regime_p95_ratio"] == pytest.approx(
        1.5, rel=0.01
    )


def test_claim_gate_reasons():
    plan = _plan()
    rate = {
        "no_sync": lambda s, d: 0.02,
        "smart": lambda s, d: 0.03 + 0.001 * (s % 3),
        "dumb": lambda s, d: 0.05,
        "oracle": lambda s, d: 0.03,
        "mr[smart]": lambda s, d: 0.03 + 0.001 * ((s + d) % 3),
    }
    # ties matched-random
    s, _ = _verdicts(plan, _runs(plan, rate))
    assert "not better than mr[smart] after Holm" in s.loc["smart", "verdict"]
    # merges do not move latency: the effect does not transfer
    better = dict(rate, **{"mr[smart]": lambda s, d: 0.06 + 0.001 * ((s + d) % 3)})
    s, _ = _verdicts(plan, _runs(plan, better, slow=1.0))
    assert "effect does not transfer" in s.loc["smart", "verdict"]
    assert not s.loc["smart", "effect_transfers"]
    # one policy saw a different load on seed 3
    s, res = _verdicts(plan, _runs(plan, better, hashes={("dumb", 3): "other"}))
    assert "loads differ" in s.loc["smart", "verdict"] and "3" in s.loc["smart", "verdict"]
    assert not res["loads"].set_index("seed").loc[3, "matched"]
    # a single seed cannot support any claim, and nothing crashes
    p1 = _plan(n_seeds=1, draws=2)
    s, _ = _verdicts(p1, _runs(p1, better))
    assert "too few seeds" in s.loc["smart", "verdict"]
    assert math.isnan(s.loc["smart", "sync_excess_ci_low"])


def test_failed_runs_show_as_incomplete():
    from wadiloco.experiments.protocol import analyse

    plan = _plan(n_seeds=4, draws=2)
    rate = {k: (lambda s, d: 0.02) for k in ("no_sync", "smart", "dumb", "oracle", "mr[smart]")}
    runs = _runs(plan, rate)
    runs.loc[(runs["policy"] == "smart") & (runs["seed"] == 2), "status"] = "error"
    s = analyse(Plan.from_dict(plan), runs)["summary"].set_index("policy")
    assert "incomplete (3 of 4 runs completed)" in s.loc["smart", "verdict"]
    assert s.loc["smart", "n_seeds"] == 3


def test_arms_restricted_to_other_regimes_are_left_out():
    from wadiloco.experiments.protocol import analyse

    plan = _plan(n_seeds=4, draws=2)
    rate = {k: (lambda s, d: 0.02 + 0.001 * s) for k in ("no_sync", "smart", "dumb", "oracle", "mr[smart]")}
    runs = _runs(plan, rate)
    plan["arms"][2]["regimes"] = ["elsewhere"]  # "dumb" does not run in regime "r"
    runs = runs[runs["policy"] != "dumb"]
    s = analyse(Plan.from_dict(plan), runs)["summary"]
    assert "dumb" not in set(s["policy"]) and len(s) == 4
