"""On/off timetables over serving time t (seconds since the testbed's `start`, before engine init).

A `Timetable` holds two views of one set, both exact (nothing is sampled):
- `intervals`: sorted, merged closed intervals clipped to [0, horizon], for lengths and overlaps;
- `active(t)`: membership with exactly the testbed's rule (`<=` or `<`), vectorised over request
  start times. The intervals are the closure of that set: they differ from it only at the end points
  of strict rules, a set of measure zero.

The rules and their sources (docs/sources.md, the paper's testbed): `periodic` is Stage 10's `t mod 37 <= 8` (3.3);
`pressure` is the 3.2 schedule, high when max(network, inference, checkpoint) >= 0.6; `windows` is
the replayed schedule of 3.4 (inclusive windows, the `--sync-events-repeat` wrap); `bursty` is the
busy test of 2.4, `(t + phase) mod period < window` (strict), which also sets c(t) and the bursty
labels of 2.6.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from wadiloco.models.errors import InputError
from wadiloco.models.spec.files import json_records, number_lines, read_text, strict_number

Rule = Callable[[np.ndarray], np.ndarray]

HIGH_PRESSURE = 0.6  # 2.6 / 3.2: "high" means max pressure >= 0.6
SYNC_WINDOW_S = 8.0  # 3.4: --sync-window-sec
REPLAY_HORIZON_S = 600.0  # 2.5: Stages 11-13 serve for 600 s


def merge_intervals(intervals: Iterable[tuple[float, float]], horizon: float) -> tuple[tuple[float, float], ...]:
    """Clip closed intervals to [0, horizon], drop empty ones, sort, and merge overlapping or touching ones."""
    clipped = sorted((max(0.0, a), min(horizon, b)) for a, b in intervals if min(horizon, b) >= max(0.0, a))
    out: list[list[float]] = []
    for a, b in clipped:
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return tuple((float(a), float(b)) for a, b in out)


@dataclass(frozen=True, eq=False)
class Timetable:
    """An on/off timetable on [0, horizon]: exact membership rule plus its closed intervals."""

    intervals: tuple[tuple[float, float], ...]
    horizon: float
    rule: Rule

    def active(self, t):
        """The testbed's membership test at t (scalar -> bool, array -> bool array); off outside [0, horizon]."""
        x = np.asarray(t, dtype=np.float64)
        on = self.rule(x) & (x >= 0.0) & (x <= self.horizon)
        return bool(on) if on.ndim == 0 else on

    def overlap(self, a: float, b: float) -> float:
        """Active time inside [a, b]."""
        if not self.intervals or b <= a:
            return 0.0
        iv = np.asarray(self.intervals)
        return float(np.clip(np.minimum(iv[:, 1], b) - np.maximum(iv[:, 0], a), 0.0, None).sum())

    def measure(self) -> float:
        return sum(b - a for a, b in self.intervals)

    def fraction(self) -> float:
        return self.measure() / self.horizon if self.horizon > 0 else 0.0

    def __or__(self, other: Timetable) -> Timetable:
        """The union, e.g. Stage 10's `both` stress mode (pressure or sync)."""
        if other.horizon != self.horizon:
            raise ValueError(f"horizons differ: {self.horizon} vs {other.horizon}")
        mine, theirs = self.rule, other.rule
        return Timetable(
            merge_intervals(self.intervals + other.intervals, self.horizon),
            self.horizon,
            lambda t: mine(t) | theirs(t),
        )


def _check_horizon(horizon: float) -> None:
    if not horizon >= 0 or not math.isfinite(horizon):
        raise ValueError(f"horizon must be finite and >= 0, got {horizon}")


# ---------------------------------------------------------------------------------------------
# periodic windows (Stage 10 sync, 3.3) and the bursty busy test (2.4)


def periodic(period: float, window: float, inclusive: bool = True, *, horizon: float, phase: float = 0.0) -> Timetable:
    """Active when `(t + phase) mod period <= window` (`<` when not inclusive); Stage 10: 37 s, 8 s."""
    if not period > 0 or window < 0:
        raise ValueError(f"need period > 0 and window >= 0, got {period}, {window}")
    _check_horizon(horizon)
    first = math.floor(phase / period)
    last = math.ceil((horizon + phase) / period)
    intervals = [(k * period - phase, k * period - phase + window) for k in range(first - 1, last + 1)]

    def rule(t: np.ndarray) -> np.ndarray:
        u = np.mod(t + phase, period)
        return u <= window if inclusive else u < window

    return Timetable(merge_intervals(intervals, horizon), horizon, rule)


def bursty(period: float = 120.0, window: float = 30.0, phase: float = 0.0, *, horizon: float) -> Timetable:
    """Stages 12-13's busy test, `(t + phase) mod period < window` (strict), decided at batch start."""
    return periodic(period, window, inclusive=False, horizon=horizon, phase=phase)


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


# ---------------------------------------------------------------------------------------------
# the pressure schedule (3.2)


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
    _check_horizon(horizon)
    intervals = _sine_at_least(2.0 * _phase_threshold(threshold) - 1.0, period, horizon)
    if threshold <= 0.0:
        intervals = [(0.0, horizon)]
    elif threshold <= 0.8:  # the checkpoint quarter: floor(t / P) mod 4 == 3
        quarters = range(math.ceil(horizon / (4 * period)) + 1)
        intervals += [((4 * k + 3) * period, (4 * k + 4) * period) for k in quarters]
    return Timetable(merge_intervals(intervals, horizon), horizon, lambda t: max_pressure(t, period) >= threshold)


# ---------------------------------------------------------------------------------------------
# replayed sync windows (3.4)


def trace_duration(starts: Sequence[float], window: float = SYNC_WINDOW_S, last_record: float | None = None) -> float:
    """D = the last record's time since coordinator_start, or the last start + window if larger (3.4)."""
    tail = max(starts) + window if len(starts) else 0.0
    return max(tail, last_record if last_record is not None else 0.0)


def windows(
    starts: Sequence[float],
    window: float = SYNC_WINDOW_S,
    *,
    duration: float | None = None,
    repeat: bool = True,
    horizon: float = REPLAY_HORIZON_S,
) -> Timetable:
    """Sync windows [s, s + window] (inclusive, 3.4) with the `--sync-events-repeat` wrap: serving time
    t maps to t mod D when D > window (the testbed says 8 s, its window), D = `duration` or
    `trace_duration(starts)`. A trace shorter than the horizon replays; a longer one is cut."""
    _check_horizon(horizon)
    s = np.sort(np.asarray(starts, dtype=np.float64))
    d = trace_duration(s, window) if duration is None else float(duration)
    wrap = repeat and d > window
    spans = [(a, a + window) for a in s]
    if wrap:
        spans = [(r * d + a, r * d + min(b, d)) for r in range(math.ceil(horizon / d) + 1) for a, b in spans]

    def rule(t: np.ndarray) -> np.ndarray:
        u = np.mod(t, d) if wrap else t
        i = np.searchsorted(s, u, side="right") - 1  # the latest start <= u: equal windows nest by start
        return (i >= 0) & (u <= s[np.maximum(i, 0)] + window) if len(s) else np.zeros(np.shape(u), dtype=bool)

    return Timetable(merge_intervals(spans, horizon), horizon, rule)


@dataclass(frozen=True)
class SyncTrace:
    """Window starts (s since coordinator_start) and the trace length D they replay with."""

    starts: tuple[float, ...]
    duration: float


def sync_trace_from_events(records: Sequence[dict], window: float = SYNC_WINDOW_S, file: object = None) -> SyncTrace:
    """Starts and D from coordinator records (3.4): starts = (ts of merged - ts of coordinator_start) / 1000,
    D from the latest record (coordinator_stop in a complete log)."""
    begin = [r["ts_ms"] for r in records if r.get("event") == "coordinator_start"]
    if not begin:
        raise InputError(file, "", "no coordinator_start record: the window starts have no origin")
    t0 = begin[0]
    starts = tuple((r["ts_ms"] - t0) / 1000.0 for r in records if r.get("event") == "merged")
    last = (max(r["ts_ms"] for r in records) - t0) / 1000.0
    return SyncTrace(starts, trace_duration(starts, window, last))


MAX_TS_MS = 1e15  # a coordinator's clock in ms since the epoch (1e15 ms is 31,000 years): past it, a typo


def _json_records(text: str, path: Path) -> list[dict]:
    """A coordinator log's records (models.spec.files reads it strictly): `ts_ms` a finite number of
    ms in [0, 1e15], never a boolean, and `event` a text."""
    records = []
    for n, rec in json_records(path, "coordinator log", text):
        ts, why = strict_number(rec.get("ts_ms"), 0.0, MAX_TS_MS)
        if why or not isinstance(rec.get("event"), str):
            field = "ts_ms" if why else "event"
            raise InputError(path, f"line {n}", f"{field}: " + (why or "must be a text (the record's kind)"))
        records.append({**rec, "ts_ms": ts})
    return records


def load_sync_trace(path: str | Path, window: float = SYNC_WINDOW_S) -> SyncTrace:
    """Read window starts from a coordinator JSONL log (3.4) or from one number (seconds) per line: a
    regular file within the input size limit, every number finite and in range (models.spec.files)."""
    path = Path(path)
    text = read_text(path, "windows or schedule file")
    if any(line.lstrip().startswith("{") for line in text.splitlines()):
        trace = sync_trace_from_events(_json_records(text, path), window, path)
        if any(s < 0 for s in trace.starts):
            raise InputError(path, "ts_ms", "a `merged` record comes before coordinator_start")
        return trace
    starts = [x for _, x in number_lines(path, "window start (s)", 0.0, MAX_TS_MS / 1e3)]
    return SyncTrace(tuple(starts), trace_duration(starts, window))


def windows_from_file(path: str | Path, window: float = SYNC_WINDOW_S, **kw) -> Timetable:
    trace = load_sync_trace(path, window)
    return windows(trace.starts, window, duration=trace.duration, **kw)
