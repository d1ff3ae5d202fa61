"""Statistics and the claim gate: Holm against statsmodels, bootstrap CI coverage, degenerate data,
the paired test, and the verdicts on synthetic runs with known answers."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from wadiloco.experiments.stats import (
    CI,
    bootstrap_mean_ci,
    bootstrap_ratio_of_means_ci,
    envelope,
    holm,
    paired_wilcoxon,
    placement_test,
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
    # data without variance get no interval, and say why (never a [0, 0] interval)
    zero = bootstrap_mean_ci([0.0, 0.0, 0.0])
    assert (zero.mean, zero.n, zero.note) == (0.0, 3, "all zero") and math.isnan(zero.low) and math.isnan(zero.high)
    same = bootstrap_mean_ci([0.2, 0.2])
    assert (
        same.note == "no variance across seeds"
        and math.isnan(same.low)
        and same.fmt() == "0.20 (no variance across seeds)"
    )
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
    r = bootstrap_ratio_of_means_ci([2.0, 4.0, 2.0], [1.0, 2.0, 1.0], n_resamples=200)
    assert r.mean == 2.0 and math.isnan(r.low) and r.note == "no variance across seeds"
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
    # zero differences: left out of the test (scipy's "wilcox"), and the note says how many
    assert paired_wilcoxon([0, -1, -2, -3, -4, -5, -6]) == (
        pytest.approx(2 / 64),
        "1 of 7 differences zero, left out of the test",
    )


# ---- the placement test: exact, calibrated under its null, and with power ------------------------

SEEDS, R = 30, 20  # the paper study's size
SHAPES = ("lognormal", "zero_inflated", "discrete")
SD = {"lognormal": math.sqrt((math.e - 1) * math.e), "zero_inflated": math.sqrt(0.64), "discrete": math.sqrt(1.5)}


def _null_values(shape: str, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """seeds x (R + 1) values exchangeable within a seed, each seed on its own scale; column 0 is
    "the policy", one more draw: skewed (lognormal, skew ~6), zero-inflated (60% zeros, as sync-excess
    often is) or discrete (Poisson counts, many ties)."""
    scale = rng.lognormal(0, 0.5, size=(SEEDS, 1))
    n = (SEEDS, R + 1)
    if shape == "lognormal":
        x = rng.lognormal(0, 1, size=n)
    elif shape == "zero_inflated":
        x = np.where(rng.random(n) < 0.6, 0.0, rng.exponential(1.0, n))
    else:
        x = rng.poisson(1.5, n).astype(float)
    return x * scale, scale[:, 0]


def _rejections(test, shape: str, reps: int, shift_sd: float = 0.0, seed: int = 1) -> int:
    """How often `test(policy, draws)` gives p < 0.05 over `reps` data sets, the policy moved down
    by `shift_sd` of the shape's standard deviation (0: the null)."""
    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(reps):
        v, scale = _null_values(shape, rng)
        hits += test(v[:, 0] - shift_sd * SD[shape] * scale, v[:, 1:]) < 0.05
    return hits


def _wilcoxon_on_means(policy, draws) -> float:
    """The test this project used before: one run minus the mean of its draws, Wilcoxon, here
    one-sided in the claimed direction. Not exact: the difference is not symmetric under the null."""
    from scipy import stats

    d = policy - draws.mean(axis=1)
    return float(stats.wilcoxon(d[d != 0], alternative="less").pvalue)


def test_placement_test_is_exact_by_enumeration():
    """The p-value is the share of the (R + 1)^seeds equally likely choices of which value is the
    policy's whose rank sum is at most the observed one (ties and an all-tie seed included)."""
    import itertools

    from wadiloco.experiments.stats import _twice_midranks

    pol = np.array([1.0, 0.0, 2.0, 5.0])
    draws = np.array([[1.0, 2.0, 0.5], [0.0, 0.0, 0.0], [3.0, 2.0, 2.0], [1.0, 7.0, 6.0]])
    ranks = [_twice_midranks(np.append(r, x)) for x, r in zip(pol, draws)]
    obs = sum(int(u[-1]) for u in ranks)
    sums = [sum(int(u[i]) for u, i in zip(ranks, c)) for c in itertools.product(*[range(4)] * 4)]
    res = placement_test(pol, draws)
    assert res.p == pytest.approx(np.mean([t <= obs for t in sums]), abs=1e-12)
    assert placement_test(pol, draws, "greater").p == pytest.approx(np.mean([t >= obs for t in sums]), abs=1e-12)
    assert (res.n_seeds, res.n_informative) == (4, 3)  # seed 1 ties throughout: no information
    assert res.statistic == res.rank_sum == obs / 2 - 1.5  # the all-tie seed's u = 1.5 is left out
    assert res.mean_rank == pytest.approx(res.rank_sum / 9)


def test_placement_test_degenerate_and_extreme():
    z = placement_test(np.zeros(5), np.zeros((5, 4)))
    assert z.p == 1.0 and z.n_informative == 0 and "no informative seed" in z.note
    assert placement_test([np.nan], [[1.0, 2.0]]).note == "no data"
    # below every draw on every one of 3 seeds with R = 4: p = (1/5)^3, exactly the smallest possible
    best = placement_test(np.zeros(3), np.ones((3, 4)))
    assert best.p == pytest.approx(0.2**3) and best.mean_rank == 0.0
    assert placement_test(np.zeros(3), np.ones((3, 4)), "greater").p == 1.0
    # missing draws shorten that seed's R; a seed without any draw is left out
    ragged = placement_test([0.0, 0.0, 0.0], [[1.0, np.nan], [1.0, 1.0], [np.nan, np.nan]])
    assert ragged.n_seeds == 2 and ragged.p == pytest.approx(1 / 2 * 1 / 3)
    with pytest.raises(ValueError):
        placement_test([1.0], [[1.0]], alternative="lower")


@pytest.mark.parametrize("shape", SHAPES)
def test_placement_test_is_calibrated_under_its_null(shape):
    """1,000 null data sets (the policy is one more matched-random draw, 30 seeds x R = 20): at alpha
    0.05 the test rejects as often as its level says, inside the 99.8% binomial range of Bin(1000,
    0.05) at the top and not below that of Bin(1000, 0.03) (an exact test on discrete data may be a
    little conservative, not useless)."""
    from scipy import stats

    reps = 1000
    hits = _rejections(lambda p, d: placement_test(p, d).p, shape, reps)
    assert stats.binom.ppf(0.001, reps, 0.03) <= hits <= stats.binom.ppf(0.999, reps, 0.05), hits / reps


def test_the_calibration_check_catches_a_biased_test():
    """The same check on the procedure it replaces (Wilcoxon on one run minus the mean of 20, one-sided):
    with skewed data it claims a placement gain in far more than 5% of null data sets."""
    from scipy import stats

    reps = 400
    hits = _rejections(_wilcoxon_on_means, "lognormal", reps)
    assert hits > stats.binom.ppf(0.999, reps, 0.05), hits / reps


@pytest.mark.parametrize(
    "shape, shift, power", [("lognormal", 0.5, 0.95), ("zero_inflated", 0.5, 0.95), ("discrete", 1.0, 0.8)]
)
def test_placement_test_detects_a_better_placed_policy(shape, shift, power):
    """A policy whose values sit `shift` standard deviations below random placement's is detected
    (p < 0.05) in most of 200 data sets of the study's size."""
    hits = _rejections(lambda p, d: placement_test(p, d).p, shape, 200, shift_sd=shift, seed=2)
    assert hits >= power * 200, hits / 200


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
            "name": "overlap_oracle",
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
    np.testing.assert_allclose(comps["p_placement_holm"], holm(comps["p_placement"]))
    # smart is below every one of its 5 draws on all 8 seeds: the smallest p there is, (1/6)^8
    assert comps.set_index("policy").loc["smart", "p_placement"] == pytest.approx(6.0**-8)
    assert s.loc["smart", "placement_rank"] == 0.0 and s.loc["smart", "holm_family"].startswith("2 ")
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
    assert "not better placed than mr[smart] (placement test" in s.loc["smart", "verdict"]
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


def test_gate_tests_in_the_claimed_direction_only():
    """27 seeds a little worse than every draw and 3 far better: the mean favours the policy and a
    two-sided test on the mean difference calls it significant; the one-sided placement test does not."""
    plan = _plan(n_seeds=30, draws=5)
    rate = {
        "no_sync": lambda s, d: 0.02,
        "smart": lambda s, d: 0.001 if s < 3 else 0.0401,
        "dumb": lambda s, d: 0.05,
        "oracle": lambda s, d: 0.04,
        "mr[smart]": lambda s, d: 0.035 + 0.001 * d,
    }
    s, res = _verdicts(plan, _runs(plan, rate))
    c = res["comparisons"].set_index("policy").loc["smart"]
    assert c["diff_mean"] < 0 and c["p_wilcoxon"] < 0.01
    assert c["p_placement"] > 0.99 and c["mean_rank"] > 0.8
    assert "not better placed" in s.loc["smart", "verdict"]


def test_holm_runs_over_the_whole_sweep_and_leaves_untestable_comparisons_out():
    plan = _plan(n_seeds=6, draws=3)
    plan["regimes"] = [{"name": "r", "scenario_hash": "h"}, {"name": "q", "scenario_hash": "h2"}]
    rate = {
        "no_sync": lambda s, d: 0.02,
        "smart": lambda s, d: 0.021,
        "dumb": lambda s, d: 0.05,
        "oracle": lambda s, d: 0.03 + 0.001 * (s % 2),
        "mr[smart]": lambda s, d: 0.025 + 0.001 * d,
    }
    runs = _runs(plan, rate)
    runs = pd.concat([runs, runs.assign(regime="q", scenario_hash="h2")], ignore_index=True)
    # in regime q every run has the same violations: nothing to test there
    q = runs["regime"] == "q"
    runs.loc[q, "slo_violation_rate"] = 0.02
    runs.loc[q, "sync_excess"] = 0.0
    s, res = _verdicts(plan, runs)
    comps = res["comparisons"]
    tested = comps["p_placement"].notna()
    assert list(comps.loc[tested, "regime"]) == ["r", "r"] and not tested[comps["regime"] == "q"].any()
    np.testing.assert_allclose(comps.loc[tested, "p_placement_holm"], holm(comps.loc[tested, "p_placement"]))
    assert res["family"].startswith("2 policy-vs-matched-random comparisons") and "2 more without one" in res["family"]
    summ = res["summary"]
    q_smart = summ[summ["regime"] == "q"].set_index("policy").loc["smart"]
    assert "placement not testable" in q_smart["verdict"] and q_smart["sync_excess_note"] == "all zero"
    assert math.isnan(q_smart["sync_excess_ci_low"])


def test_transfer_is_measured_on_the_matched_random_draws():
    """The policy slows the requests it overlaps, random placement does not: the effect does not
    transfer (the regime's figure is the draws'), and the policy's own ratio is reported beside it."""
    plan = _plan(n_seeds=8, draws=5)
    rate = {k: (lambda s, d: 0.02 + 0.001 * ((s + d) % 3)) for k in ("no_sync", "smart", "dumb", "oracle", "mr[smart]")}
    runs = _runs(plan, rate)
    pol = runs["role"] == "policy"
    runs.loc[~pol, "e2e_p95_overlap_matched_s"] = runs.loc[~pol, "e2e_p95_overlap_baseline_s"] * 1.01
    runs["p95_ratio_matched"] = runs["e2e_p95_overlap_matched_s"] / runs["e2e_p95_overlap_baseline_s"]
    s, res = _verdicts(plan, runs)
    assert s.loc["smart", "transfer_basis"] == "matched-random draws"
    assert s.loc["smart", "regime_p95_ratio"] == pytest.approx(1.01, rel=1e-3)
    assert s.loc["smart", "p95_ratio_matched"] == pytest.approx(1.5, rel=0.01)
    assert not s.loc["smart", "effect_transfers"] and "effect too small" in s.loc["smart", "verdict"]
    sens = res["sensitivity"]
    own = sens[(sens["basis"] == "the policy's own runs")]
    assert set(own["threshold"]) == {1.0, 1.02, 1.05, 1.1}


def test_verdict_says_merges_relieve_serving():
    plan = _plan(n_seeds=8, draws=5)
    rate = {
        "no_sync": lambda s, d: 0.10,
        "smart": lambda s, d: 0.05 + 0.001 * (s % 3),
        "dumb": lambda s, d: 0.05,
        "oracle": lambda s, d: 0.05,
        "mr[smart]": lambda s, d: 0.05 + 0.001 * ((s + d) % 3),
    }
    s, _ = _verdicts(plan, _runs(plan, rate, slow=0.8))
    assert s.loc["smart", "transfer_state"] == "relieves"
    assert "merges relieve serving here" in s.loc["smart", "verdict"]
    assert "does not transfer" not in s.loc["smart", "verdict"]


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


def test_null_check_on_runs_counts_rejections_of_draws_against_draws(tmp_path, capsys):
    """experiments.studies.null_check takes each matched-random draw as the policy against the others: on
    skewed draws the placement test rejects about as often as its level, the old Wilcoxon reading
    far more; a control whose runs all tie is not tested; a folder without runs.csv is an error."""
    from wadiloco.experiments.studies import null_check as nc

    rng = np.random.default_rng(5)
    rows = []
    for regime, draw_rate in (("skewed", lambda: 0.02 + 0.01 * rng.lognormal(0, 1.5)), ("flat", lambda: 0.0)):
        for seed in range(30):
            for draw in range(20):
                r = draw_rate()
                rows.append({"regime": regime, "policy": "mr", "role": "control", "status": "ok", "seed": seed,
                             "draw": draw, "slo_violation_rate": r, "sync_excess": r - 0.02})  # fmt: skip
    t = nc.null_check(pd.DataFrame(rows)).set_index("regime")
    assert t.loc["skewed", "tests"] == t.loc["skewed", "tested"] == 20 and t.loc["flat", "tested"] == 0
    assert t.loc["skewed", "placement_rejections"] <= 4 < t.loc["skewed", "wilcoxon_rejections"]
    pd.DataFrame(rows).to_csv(tmp_path / "runs.csv", index=False)
    assert nc.main([str(tmp_path)]) == 0 and "placement: " in capsys.readouterr().out
    assert nc.main([str(tmp_path / "nowhere")]) == 2
