"""Request-rate forecasters for online merge policies. Plain numpy/statsmodels, no SimPy.

Interface (duck-typed, see `Forecaster`): `update(counts)` is given the whole history of
fleet-wide arrival counts per completed monitor bin (the observation's `arrival_counts`, past
bins only) and consumes the bins it has not seen yet; `forecast(n)` returns the expected counts
of the next n bins (bin 0 is the bin after the last completed one). A forecaster only ever sees
the past: nothing here can reach the simulator or the trace.

* `EWMA`: a one-step exponentially weighted moving average of the per-bin count,
  level <- alpha * x + (1 - alpha) * level. Its forecast is flat (the level for every future bin):
  it tracks the current rate but cannot say that a burst will end or start.
* `HoltWinters`: statsmodels `ExponentialSmoothing` with an additive seasonal component, refitted
  every `refit_s` seconds of history on the last `fit_s` seconds. The season is `season_s` if
  given, else the lag with the largest autocorrelation of the history (between `min_season_s`
  and half the history), accepted only if that autocorrelation is at least 0.3; without a season
  (or with less than two seasons of history) it behaves as the EWMA. Between refits it reads the
  last fit's forecast further along, so it costs one fit per `refit_s`, not one per call.
"""

from __future__ import annotations

import math
import warnings
from typing import Protocol

import numpy as np


class Forecaster(Protocol):
    def update(self, counts: np.ndarray) -> None: ...

    def forecast(self, n: int) -> np.ndarray: ...


class EWMA:
    def __init__(self, alpha: float = 0.3):
        if not 0 < alpha <= 1:
            raise ValueError(f"alpha must be in (0, 1], got {alpha}")
        self.alpha = alpha
        self.level: float | None = None
        self.seen = 0

    def update(self, counts: np.ndarray) -> None:
        a = self.alpha
        lvl = self.level
        for x in counts[self.seen :]:
            lvl = float(x) if lvl is None else a * float(x) + (1.0 - a) * lvl
        self.level = lvl
        self.seen = len(counts)

    def forecast(self, n: int) -> np.ndarray:
        return np.full(n, self.level if self.level is not None else 0.0)


def detect_season(x: np.ndarray, min_lag: int, min_acf: float = 0.3) -> int | None:
    """The lag (in bins) with the largest autocorrelation in [min_lag, len/2], if it is >= min_acf."""
    n = len(x)
    hi = n // 2
    if hi <= min_lag:
        return None
    y = np.asarray(x, dtype=float) - np.mean(x)
    denom = math.fsum(y * y)  # (np.dot goes through the BLAS, whose last bits differ by CPU)
    if denom <= 0:
        return None
    # Autocorrelation by FFT, normalised by the overlap length so long lags are not penalised.
    m = 1 << (2 * n - 1).bit_length()
    f = np.fft.rfft(y, m)
    ac = np.fft.irfft(f * np.conj(f), m)[: hi + 1]
    acf = ac / denom * n / (n - np.arange(hi + 1))
    seg = acf[min_lag : hi + 1]
    best = float(seg.max())
    if best < min_acf:
        return None
    # Multiples of the period correlate about as well as the period itself: take the first lag
    # that comes within 10 % of the best one.
    i = int(np.argmax(seg >= 0.9 * best))
    j = i
    while j + 1 < len(seg) and seg[j + 1] >= 0.9 * best:
        j += 1
    return min_lag + i + int(np.argmax(seg[i : j + 1]))  # the peak of that first hill


class HoltWinters:
    def __init__(
        self,
        bin_s: float,
        alpha: float = 0.3,
        season_s: float | None = None,
        refit_s: float = 60.0,
        fit_s: float = 600.0,
        min_season_s: float = 20.0,
    ):
        self.bin_s = bin_s
        self.fallback = EWMA(alpha)
        self.season = None if season_s is None else max(2, int(round(season_s / bin_s)))
        self.auto = season_s is None
        self.refit = max(1, int(round(refit_s / bin_s)))
        self.fit_bins = max(4, int(round(fit_s / bin_s)))
        self.min_lag = max(2, int(round(min_season_s / bin_s)))
        self.history = np.empty(0)
        self._fc: np.ndarray | None = None  # forecast from the last fit, starting at bin _fit_at
        self._fit_at = -1
        self.fits = 0

    def update(self, counts: np.ndarray) -> None:
        self.fallback.update(counts)
        self.history = np.asarray(counts, dtype=float)
        n = len(self.history)
        if self._fit_at < 0 or n - self._fit_at >= self.refit:
            self._fit(n)

    def _fit(self, n: int) -> None:
        self._fit_at = n
        self._fc = None
        x = self.history[-self.fit_bins :]
        season = detect_season(x, self.min_lag) if self.auto else self.season
        if season is None or len(x) < 2 * season + 10:
            return  # statsmodels' heuristic initialisation needs two seasons and a few more bins
        x = x[-4 * season :]  # four seasons are plenty, and keep each fit at a few tens of ms
        from statsmodels.tsa.holtwinters import ExponentialSmoothing

        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                model = ExponentialSmoothing(
                    x, trend=None, seasonal="add", seasonal_periods=season, initialization_method="heuristic"
                )
                fit = model.fit()
            # Enough ahead for one refit interval plus a long lookahead.
            self._fc = np.maximum(np.asarray(fit.forecast(self.refit + 4 * season + 1024), dtype=float), 0.0)
            self.fits += 1
        except Exception:  # noqa: BLE001 - a failed fit just falls back to the EWMA
            self._fc = None

    def forecast(self, n: int) -> np.ndarray:
        if self._fc is None:
            return self.fallback.forecast(n)
        off = len(self.history) - self._fit_at
        out = self._fc[off : off + n]
        if len(out) < n:
            out = np.concatenate([out, np.full(n - len(out), out[-1] if len(out) else self.fallback.level or 0.0)])
        return out


def window_costs(rate_bins: np.ndarray, origin: float, starts: np.ndarray, length: float, bin_s: float) -> np.ndarray:
    """Expected arrivals in [s, s + length] for each start s, integrating a per-bin forecast that
    begins at time `origin` (piecewise constant within bins; past the end, the last bin's rate)."""
    f = np.asarray(rate_bins, dtype=float)
    edges = origin + bin_s * np.arange(len(f) + 1)
    cum = np.concatenate([[0.0], np.cumsum(f)])

    def F(t):
        t = np.asarray(t, dtype=float)
        i = np.clip(((t - origin) // bin_s).astype(int), 0, len(f) - 1)
        frac = np.clip((t - edges[i]) / bin_s, 0.0, None)
        return cum[i] + f[i] * frac

    return F(np.asarray(starts) + length) - F(np.maximum(np.asarray(starts), origin))


def make_forecaster(
    kind: str, bin_s: float, alpha: float, season_s: float | None = None, refit_s: float = 60.0
) -> Forecaster:
    if kind == "ewma":
        return EWMA(alpha)
    if kind == "holt_winters":
        return HoltWinters(bin_s, alpha, season_s, refit_s)
    raise ValueError(f"unknown forecaster {kind!r}")


__all__ = ["Forecaster", "EWMA", "HoltWinters", "detect_season", "window_costs", "make_forecaster"]
