"""Statistics for the calibration protocol: bootstrap CIs, envelopes, the placement test, Holm.

Every function is deterministic given its inputs (the bootstrap takes an explicit Generator) and
never raises on degenerate data: n < 2 and data without variance give no interval (NaN bounds),
with a `note` saying which ("all zero", "no variance across seeds"), so nothing prints a [0, 0]
interval; an interval is reported as the bootstrap gives it, never widened to contain the mean.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class CI:
    mean: float
    low: float
    high: float
    n: int
    note: str = ""

    def fmt(self, scale: float = 1.0, digits: int = 2) -> str:
        if not math.isfinite(self.mean):
            return "n/a"
        m = f"{self.mean * scale:.{digits}f}"
        if not (math.isfinite(self.low) and math.isfinite(self.high)):
            return f"{m} ({self.note})" if self.note else m
        return f"{m} [{self.low * scale:.{digits}f}, {self.high * scale:.{digits}f}]"


ALL_ZERO, NO_VARIANCE = "all zero", "no variance across seeds"


def no_variance(a: np.ndarray) -> str:
    """What to print instead of an interval for data without variance."""
    return ALL_ZERO if np.all(np.asarray(a) == 0) else NO_VARIANCE


def _finite(x) -> np.ndarray:
    a = np.asarray(x, dtype=float).ravel()
    return a[np.isfinite(a)]


def bootstrap_mean_ci(
    x, *, confidence: float = 0.95, n_resamples: int = 9999, method: str = "BCa", rng: np.random.Generator | None = None
) -> CI:
    """Mean of `x` with a bootstrap CI (scipy.stats.bootstrap). Non-finite values are dropped.

    For paired data pass the per-pair differences (a paired bootstrap resamples pairs)."""
    from scipy import stats

    a = _finite(x)
    n = len(a)
    if n == 0:
        return CI(float("nan"), float("nan"), float("nan"), 0, "no data")
    mean = float(np.mean(a))
    if n < 2:
        return CI(mean, float("nan"), float("nan"), n, "n < 2: no interval")
    if np.all(a == a[0]):
        return CI(mean, float("nan"), float("nan"), n, no_variance(a))
    rng = rng if rng is not None else np.random.default_rng(0)
    note = ""
    res = None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            res = stats.bootstrap(
                (a,),
                np.mean,
                confidence_level=confidence,
                n_resamples=n_resamples,
                method=method,
                rng=rng,
                vectorized=True,
                axis=-1,
            )
        except (ValueError, FloatingPointError):
            res = None
        lo, hi = (float(res.confidence_interval.low), float(res.confidence_interval.high)) if res else (np.nan,) * 2
        if not (math.isfinite(lo) and math.isfinite(hi)) and method != "percentile":
            # BCa degenerates when (almost) every resample has the same mean, e.g. one non-zero
            # value among zeros; the percentile interval is still defined.
            res = stats.bootstrap(
                (a,),
                np.mean,
                confidence_level=confidence,
                n_resamples=n_resamples,
                method="percentile",
                rng=rng,
                vectorized=True,
                axis=-1,
            )
            lo, hi = float(res.confidence_interval.low), float(res.confidence_interval.high)
            note = f"{method} degenerate: percentile interval"
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return CI(mean, float("nan"), float("nan"), n, "bootstrap failed: no interval")
    return CI(mean, lo, hi, n, note)


def bootstrap_ratio_of_means_ci(num, den, **kw) -> CI:
    """mean(num) / mean(den) over paired observations (pairs resampled together)."""
    from scipy import stats

    a, b = np.asarray(num, dtype=float), np.asarray(den, dtype=float)
    ok = np.isfinite(a) & np.isfinite(b)
    a, b = a[ok], b[ok]
    n = len(a)
    if n == 0 or np.mean(b) == 0:
        return CI(float("nan"), float("nan"), float("nan"), n, "no data")
    r = float(np.mean(a) / np.mean(b))
    if n < 2:
        return CI(r, float("nan"), float("nan"), n, "n < 2: no interval")
    if np.all(b > 0) and np.all(a / b == a[0] / b[0]):  # every resample gives r
        return CI(r, float("nan"), float("nan"), n, NO_VARIANCE)
    rng = kw.get("rng") or np.random.default_rng(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            res = stats.bootstrap(
                (a, b),
                lambda x, y, axis=-1: np.mean(x, axis=axis) / np.mean(y, axis=axis),
                paired=True,
                vectorized=True,
                confidence_level=kw.get("confidence", 0.95),
                n_resamples=kw.get("n_resamples", 9999),
                method=kw.get("method", "BCa"),
                rng=rng,
            )
            lo, hi = float(res.confidence_interval.low), float(res.confidence_interval.high)
        except (ValueError, FloatingPointError, ZeroDivisionError):
            lo = hi = float("nan")
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return CI(r, float("nan"), float("nan"), n, "bootstrap failed: no interval")
    return CI(r, lo, hi, n)


def envelope(x, low: float = 2.5, high: float = 97.5) -> tuple[float, float]:
    a = _finite(x)
    if len(a) == 0:
        return float("nan"), float("nan")
    return float(np.percentile(a, low)), float(np.percentile(a, high))


def paired_wilcoxon(d) -> tuple[float, str]:
    """Two-sided Wilcoxon signed-rank p-value of paired differences `d` (NaNs dropped).

    All-zero differences give p = 1 (no evidence of any difference); fewer than 2 pairs give NaN.
    Exact null distribution for small n without ties or zeros; otherwise the normal approximation."""
    from scipy import stats

    a = _finite(d)
    if len(a) < 2:
        return float("nan"), f"n={len(a)} pairs: no test"
    if np.all(a == 0):
        return 1.0, "all differences zero: p = 1"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            res = stats.wilcoxon(a, zero_method="wilcox", alternative="two-sided")
            p = float(res.pvalue)
        except ValueError as e:
            return float("nan"), f"no test ({e})"
    if not math.isfinite(p):
        return float("nan"), "no test (degenerate)"
    zeros = int(np.sum(a == 0))
    return min(max(p, 0.0), 1.0), (f"{zeros} of {len(a)} differences zero, left out of the test" if zeros else "")


@dataclass(frozen=True)
class PlacementTest:
    """The placement test's result (see `placement_test`)."""

    p: float  # exact one-sided p-value in the direction `alternative` (two-sided: twice the smaller tail)
    rank_sum: float  # the statistic: sum over informative seeds of the policy's mid-rank u (draws below, ties half)
    mean_rank: float  # rank_sum / draws in informative seeds: 0 below every draw, 0.5 expected under the null
    n_seeds: int  # seeds with a policy value and at least one draw
    n_informative: int  # of those, the seeds where not every value ties
    alternative: str
    note: str = ""

    @property
    def statistic(self) -> float:
        return self.rank_sum


def _twice_midranks(vals: np.ndarray) -> np.ndarray:
    """For each value, 2 x (others below it) + (others equal to it): twice its mid-rank from 0."""
    srt = np.sort(vals)
    return np.searchsorted(srt, vals, "left") + np.searchsorted(srt, vals, "right") - 1


def placement_test(policy, draws, alternative: str = "less") -> PlacementTest:
    """Is the policy placed better than random? Exact under the null that, on every seed, its value
    is one more draw of its matched-random control (exchangeable with the R draws).

    `policy` holds one value per seed, `draws` the control's values (seeds x R; NaN: missing). Per
    seed, u = the policy's mid-rank among its R + 1 values; under the null, given the values, u is
    the mid-rank of one of them chosen uniformly, so the sum of u over seeds has the convolution of
    those discrete uniform laws as its exact null distribution (no symmetry or normality assumed;
    ties and zeros are handled by the mid-ranks). A seed where every value ties has a fixed u: it is
    uninformative and left out of the statistic and the count `n_informative` (no such seed: p = 1).
    `alternative="less"`: the policy's values lower than random placement's."""
    if alternative not in ("less", "greater", "two-sided"):
        raise ValueError(f"alternative must be less, greater or two-sided (got {alternative!r})")
    pol = np.asarray(policy, dtype=float).ravel()
    d = np.asarray(draws, dtype=float)
    d = d.reshape(len(pol), -1) if d.ndim < 2 else d
    if d.shape[0] != len(pol):
        raise ValueError(f"draws has {d.shape[0]} rows for {len(pol)} policy values")
    pmf, twice, n_draws, n_seeds, n_inf = np.ones(1), 0, 0, 0, 0
    for x, row in zip(pol, d):
        row = row[np.isfinite(row)]
        if not math.isfinite(x) or len(row) == 0:
            continue
        n_seeds += 1
        vals = np.append(row, x)
        if np.all(vals == vals[0]):
            continue
        n_inf, n_draws = n_inf + 1, n_draws + len(row)
        u2 = _twice_midranks(vals)
        twice += int(u2[-1])
        pmf = np.convolve(pmf, np.bincount(u2, minlength=2 * len(row) + 1) / len(vals))
    if n_inf == 0:
        note = "no informative seed (every value ties)" if n_seeds else "no data"
        return PlacementTest(1.0, float("nan"), float("nan"), n_seeds, 0, alternative, note)
    lower, upper = float(pmf[: twice + 1].sum()), float(pmf[twice:].sum())
    p = {"less": lower, "greater": upper, "two-sided": 2 * min(lower, upper)}[alternative]
    return PlacementTest(min(p, 1.0), twice / 2, twice / 2 / n_draws, n_seeds, n_inf, alternative)


def holm(pvals, alpha: float = 0.05) -> np.ndarray:
    """Holm-adjusted p-values (statsmodels multipletests); NaNs stay NaN and are not counted."""
    from statsmodels.stats.multitest import multipletests

    p = np.asarray(pvals, dtype=float)
    out = np.full(p.shape, np.nan)
    ok = np.isfinite(p)
    if ok.any():
        out[ok] = multipletests(p[ok], alpha=alpha, method="holm")[1]
    return out
