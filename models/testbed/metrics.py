"""The testbed's own summary of a run (`_summary` in the artifact; docs/sources.md, testbed 5).

Every request carries its batch's start time and wall-clock latency; labels are read at batch start.
Percentiles are request-weighted with linear interpolation at rank (n - 1) q / 100 (numpy's default).
`sync ratio` is p95 of sync-active requests over p95 of the rest; `high/low` the same for requests
whose max pressure is >= 0.6; `tokens_per_s` is output tokens over (last batch start - first batch
start); `corr` is Pearson's correlation of max pressure with latency.
"""

from __future__ import annotations

import math

import numpy as np

HIGH = 0.6


def _p(x: np.ndarray, q: float) -> float:
    return float(np.percentile(x, q)) if len(x) else math.nan


def _bin(lat_ms: np.ndarray, mask: np.ndarray) -> dict:
    return {"n": int(mask.sum()), "p95_ms": _p(lat_ms[mask], 95)}


def summarize(
    start: np.ndarray, latency_s: np.ndarray, output: np.ndarray, sync: np.ndarray, pressure: np.ndarray
) -> dict:
    """The Stage 10 figures of one run from per-request arrays (`pressure` is max pressure at start)."""
    lat = np.asarray(latency_s, dtype=float) * 1e3
    sync = np.asarray(sync, dtype=bool)
    high = np.asarray(pressure, dtype=float) >= HIGH
    starts = np.unique(start)
    span = float(starts[-1] - starts[0]) if len(starts) > 1 else math.nan
    out = {
        "requests": int(len(lat)),
        "output_tokens": int(np.sum(output)),
        "p50_ms": _p(lat, 50),
        "p95_ms": _p(lat, 95),
        "p99_ms": _p(lat, 99),
        "tokens_per_s": float(np.sum(output) / span) if span and span > 0 else math.nan,
        "corr": _corr(pressure, lat),
        "sync_active": _bin(lat, sync),
        "sync_inactive": _bin(lat, ~sync),
        "high": _bin(lat, high),
        "low": _bin(lat, ~high),
    }
    out["sync_ratio"] = out["sync_active"]["p95_ms"] / out["sync_inactive"]["p95_ms"]
    out["high_low_ratio"] = out["high"]["p95_ms"] / out["low"]["p95_ms"]
    return out


def _corr(x: np.ndarray, y: np.ndarray) -> float:
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if len(x) < 2 or np.std(x) == 0 or np.std(y) == 0:
        return math.nan
    # Pearson's r summed in a fixed order (np.corrcoef's dot products go through the BLAS, whose last
    # bits differ by CPU)
    dx, dy = x - x.mean(), y - y.mean()
    r = math.fsum(dx * dy) / math.sqrt(math.fsum(dx * dx) * math.fsum(dy * dy))
    return min(1.0, max(-1.0, r))
