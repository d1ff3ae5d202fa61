"""The pure placement code behind matched_random and overlap_oracle, and the forecasters:
exact counts vs enumeration, uniform sampling (chi-square against full enumeration), optimality
of the dynamic programme vs brute force, and the corridor semantics of the final window."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from scipy import stats

from wadiloco.models.policies.forecast import EWMA, HoltWinters, detect_season, window_costs
from wadiloco.models.policies.placement import (
    PlacementError,
    UniformSampler,
    count_placements,
    enumerate_placements,
    feasible_range,
    final_window,
    min_cost_placement,
    sample_placement,
)
from wadiloco.models.results import invariants as inv

# (n, h_min, h_max, last_lo, last_hi, start)
SMALL = [
    (0, 3, 5, 0, 10, 0),
    (1, 3, 5, 2, 10, 0),
    (2, 2, 4, 4, 7, 0),
    (3, 3, 5, 9, 15, 0),
    (3, 2, 6, 8, 16, 0),
    (4, 2, 5, 10, 18, 0),
    (3, 4, 7, 20, 26, 5),  # a re-plan: gaps counted from an earlier merge at step 5
    (2, 5, 5, 10, 12, 0),  # h_min == h_max: exactly one placement
]


@pytest.mark.parametrize("case", SMALL)
def test_count_matches_enumeration(case):
    n, lo_h, hi_h, last_lo, last_hi, start = case
    allp = list(enumerate_placements(n, lo_h, hi_h, last_lo, last_hi, start))
    assert count_placements(n, lo_h, hi_h, last_lo, last_hi, start) == len(allp)
    assert feasible_range(n, lo_h, hi_h, last_lo, last_hi, start) == (len(allp) > 0)
    for p in allp:  # every enumerated placement is really feasible
        gaps = np.diff((start,) + p)
        assert np.all((gaps >= lo_h) & (gaps <= hi_h))
        assert last_lo <= (p[-1] if p else start) <= last_hi


@pytest.mark.parametrize("case", [(3, 3, 6, 12, 16, 0), (4, 2, 5, 10, 13, 0), (2, 4, 9, 12, 16, 3)])
def test_sampler_is_uniform_over_enumeration(case):
    n, lo_h, hi_h, last_lo, last_hi, start = case
    allp = list(enumerate_placements(n, lo_h, hi_h, last_lo, last_hi, start))
    assert 10 <= len(allp) <= 200  # a real test: many placements, none with special structure
    rng = np.random.default_rng(12345)
    sampler = UniformSampler(n, lo_h, hi_h, last_lo, last_hi, start)
    seen = Counter(tuple(sampler.sample(rng)) for _ in range(100 * len(allp)))
    assert set(seen) == set(allp), "the sampler produced an infeasible placement or missed one"
    obs = np.array([seen[p] for p in allp])
    res = stats.chisquare(obs)  # H0: uniform over the enumerated placements
    assert res.pvalue > 1e-3, (res, obs.min(), obs.max())


def test_chi_square_has_power_against_a_biased_sampler():
    """The check above can fail: a plausible wrong sampler (last merge uniform over the final
    window, then a uniform completion) over-weights last steps with few completions."""
    n, lo_h, hi_h, last_lo, last_hi = 3, 3, 6, 12, 16
    allp = list(enumerate_placements(n, lo_h, hi_h, last_lo, last_hi))
    rng = np.random.default_rng(2)
    seen = Counter()
    for _ in range(150 * len(allp)):
        last = int(rng.integers(last_lo, last_hi + 1))
        cands = [p for p in allp if p[-1] == last]
        seen[cands[int(rng.integers(len(cands)))]] += 1
    assert stats.chisquare(np.array([seen[p] for p in allp])).pvalue < 1e-6


def test_sampler_large_instance_is_feasible_and_reproducible():
    lo, hi = final_window(1140, 512, 8)
    a = sample_placement(5, 128, 512, lo, hi, np.random.default_rng(7))
    b = sample_placement(5, 128, 512, lo, hi, np.random.default_rng(7))
    assert a == b
    for T in (1140 - 8, 1140, 1140 + 8):  # the run may end anywhere within the slack
        inv.check_corridor(a, 128, 512, T)
        assert a[-1] <= T


def test_infeasible_raises():
    with pytest.raises(PlacementError):
        sample_placement(5, 128, 512, *final_window(400, 512), np.random.default_rng(0))
    with pytest.raises(PlacementError):
        min_cost_placement(np.zeros((1, 2001)), 1, 128, 512, *final_window(2000, 512))


@pytest.mark.parametrize("case", SMALL)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_min_cost_matches_brute_force(case, seed):
    n, lo_h, hi_h, last_lo, last_hi, start = case
    allp = list(enumerate_placements(n, lo_h, hi_h, last_lo, last_hi, start))
    rng = np.random.default_rng(seed)
    # integer costs with many ties, as arrival counts have
    cost = rng.integers(0, 6, size=(n, last_hi + 1)).astype(float)
    best = min(sum(cost[j, s] for j, s in enumerate(p)) for p in allp)
    steps, total = min_cost_placement(cost, n, lo_h, hi_h, last_lo, last_hi, start)
    assert tuple(steps) in set(allp)
    assert total == pytest.approx(best)
    assert sum(cost[j, s] for j, s in enumerate(steps)) == pytest.approx(best)


def test_min_cost_uses_the_merge_index():
    """Costs may differ per merge (earlier merges shift later ones in time): the DP must charge
    row j for the (j+1)-th merge, not row 0 for all."""
    cost = np.full((2, 11), 10.0)
    cost[0, 3] = 0.0  # first merge wants step 3
    cost[1, 8] = 0.0  # second merge wants step 8
    cost[0, 8] = 100.0
    steps, total = min_cost_placement(cost, 2, 3, 5, 6, 10)
    assert steps == [3, 8] and total == 0.0


def test_final_window_follows_the_corridor_rule():
    lo, hi = final_window(1000, 512, 5)
    assert (lo, hi) == (1000 + 5 - 512 - 1, 1000 - 5)
    inv.check_corridor([128, lo], 128, 512, 1000 + 5)  # the earliest allowed last merge is legal ...
    with pytest.raises(inv.InvariantError):
        inv.check_corridor([128, lo - 1], 128, 512, 1000 + 5)  # ... one step earlier is not


# ---- forecasters -------------------------------------------------------------------------------


def test_ewma_forecast_is_flat_and_tracks_level():
    f = EWMA(0.5)
    f.update(np.array([10.0, 10.0, 10.0]))
    assert f.forecast(3).tolist() == [10.0, 10.0, 10.0]
    f.update(np.array([10.0, 10.0, 10.0, 20.0]))  # only the new bin is consumed
    assert f.level == pytest.approx(15.0)


def test_window_costs_integrate_the_forecast():
    rate = np.array([1.0, 2.0, 3.0])  # counts per 1-s bin starting at t=10
    c = window_costs(rate, 10.0, np.array([10.0, 10.5, 11.0, 12.5]), 1.0, 1.0)
    assert c.tolist() == pytest.approx([1.0, 1.5, 2.0, 3.0])


def test_holt_winters_finds_the_season_and_forecasts_the_next_burst():
    rng = np.random.default_rng(0)
    t = np.arange(600)
    rate = np.where(((t - 37) % 120) < 30, 250.0, 50.0)
    x = rng.poisson(rate).astype(float)
    assert detect_season(x[:300], 20) == 120
    assert detect_season(rng.poisson(100, 600).astype(float), 20) is None
    hw = HoltWinters(1.0)
    for n in range(5, 601, 5):  # called every 5 bins; it refits only every 60
        hw.update(x[:n])
    fc = hw.forecast(240)
    future_on = ((np.arange(600, 840) - 37) % 120) < 30
    assert fc[future_on].mean() > 3 * fc[~future_on].mean()
    assert hw.fits <= 12  # refits every 60 bins, not every call
