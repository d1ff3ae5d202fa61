"""The testbed's pressure schedule and bursty labels (docs/sources.md, testbed 3.2 and 2.6), over serving time t.

`pressure_values` is the schedule the testbed's sidecar publishes in its mixed mode: network,
inference and checkpoint pressure from one sinusoid of period P, and a checkpoint every fourth
period; `pressure` is the timetable of its high stretches (max >= threshold), registered as the
timetable kind `pressure` (models.testbed.plugin). A bursty run labels its requests with fixed
values instead, busy or quiet by the bursty busy test (models.timetables.bursty).
"""

from __future__ import annotations

import math

import numpy as np

from wadiloco.models.timetables import Timetable, check_horizon, merge_intervals

HIGH_PRESSURE = 0.6  # 2.6 / 3.2: "high" means max pressure >= 0.6


def pressure_values(t, period: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(network, inference, checkpoint) of the 3.2 schedule at t, vectorised."""
    x = np.asarray(t, dtype=np.float64)
    phase = (np.sin(2.0 * np.pi * x / period) + 1.0) / 2.0
    network = 0.2 + 0.6 * phase
    inference = 0.1 + 0.8 * np.maximum(0.0, phase - 0.35) / 0.65
    checkpoint = np.where(np.mod(np.floor(x / period), 4) == 3, 0.8, 0.0)
    return network, inference, checkpoint


def max_pressure(t, period: float) -> np.ndarray:
    """max(network, inference, checkpoint): what requests are labelled by and correlated with (5)."""
    return np.maximum.reduce(pressure_values(t, period))


def _sine_at_least(y: float, period: float, horizon: float) -> list[tuple[float, float]]:
    """Closed intervals where sin(2 pi t / period) >= y."""
    if y <= -1.0:
        return [(0.0, horizon)]
    if y > 1.0:
        return []
    a = math.asin(y) / (2.0 * math.pi) * period  # negative when y < 0: the interval starts a period early
    return [(k * period + a, k * period + period / 2.0 - a) for k in range(-1, math.ceil(horizon / period) + 1)]


def _phase_threshold(threshold: float) -> float:
    """The least phase at which network or inference reaches `threshold`."""
    net = (threshold - 0.2) / 0.6
    inf = -math.inf if threshold <= 0.1 else 0.35 + (threshold - 0.1) * 0.65 / 0.8
    return min(net, inf)


def pressure(period: float, *, horizon: float, threshold: float = HIGH_PRESSURE) -> Timetable:
    """High pressure of the 3.2 schedule: max(network, inference, checkpoint) >= threshold.

    With P = 90 and 0.6: t mod 90 in [4.868, 40.132] plus t mod 360 in [270, 360)."""
    if not period > 0:
        raise ValueError(f"period must be > 0, got {period}")
    check_horizon(horizon)
    intervals = _sine_at_least(2.0 * _phase_threshold(threshold) - 1.0, period, horizon)
    if threshold <= 0.0:
        intervals = [(0.0, horizon)]
    elif threshold <= 0.8:  # the checkpoint quarter: floor(t / P) mod 4 == 3
        quarters = range(math.ceil(horizon / (4 * period)) + 1)
        intervals += [((4 * k + 3) * period, (4 * k + 4) * period) for k in quarters]
    return Timetable(merge_intervals(intervals, horizon), horizon, lambda t: max_pressure(t, period) >= threshold)


# Bursty labels (2.6): busy batches read inference 0.95 / network 0.70 / checkpoint 0, quiet ones
# 0.08 / 0.20 / 0. Order: (network, inference, checkpoint), as `pressure_values` returns them.
BUSY_LABELS = (0.70, 0.95, 0.0)
QUIET_LABELS = (0.20, 0.08, 0.0)


def bursty_labels(busy: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(network, inference, checkpoint) of requests given their busy flags (bursty profile, 2.6)."""
    b = np.asarray(busy, dtype=bool)
    return tuple(np.where(b, hi, lo) for hi, lo in zip(BUSY_LABELS, QUIET_LABELS))


def bursty_concurrency(busy, busy_c: int = 12, quiet_c: int = 4):
    """c(t) of the bursty profile (2.4): 12 in busy batches, 4 in quiet ones."""
    return np.where(np.asarray(busy, dtype=bool), busy_c, quiet_c)
