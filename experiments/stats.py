"""Statistics for the calibration protocol: bootstrap CIs, envelopes, paired tests, Holm.

Every function is deterministic given its inputs (the bootstrap takes an explicit Generator) and
never raises on degenerate data: n < 2 gives a NaN interval, constant data gives the point
interval (mean, mean), each with a `note` saying so.
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
            return m
        return f"{m} [{self.low * scale:.{digits}f}, {self.high * scale:.{digits}f}]"


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
        return CI(mean, mean, mean, n, "constant data: point interval")
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
    return CI(mean, min(lo, mean), max(hi, mean), n, note)


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
    return CI(r, min(lo, r), max(hi, r), n)


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
    return min(max(p, 0.0), 1.0), ""


def holm(pvals, alpha: float = 0.05) -> np.ndarray:
    """Holm-adjusted p-values (statsmodels multipletests); NaNs stay NaN and are not counted."""
    from statsmodels.stats.multitest import multipletests

    p = np.asarray(pvals, dtype=float)
    out = np.full(p.shape, np.nan)
    ok = np.isfinite(p)
    if ok.any():
        out[ok] = multipletests(p[ok], alpha=alpha, method="holm")[1]
    return out
