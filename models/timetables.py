"""On/off timetables over simulated time t (seconds): when a co-tenant computes, or a window is open.

A `Timetable` holds two views of one set, both exact (nothing is sampled):
- `intervals`: sorted, merged closed intervals clipped to [0, horizon], for lengths and overlaps;
- `active(t)`: membership with exactly the timetable's rule (`<=` or `<`), vectorised over request
  start times. The intervals are the closure of that set: they differ from it only at the end points
  of strict rules, a set of measure zero.

The kinds here: `periodic`, on when `(t + phase) mod period <= window` (`<` when not inclusive;
`bursty` is its strict form, the busy test of a bursty load); `windows`, windows [s, s + window] at
given starts, from a list or a file (one number per line, or a training coordinator's JSONL event
log: its `merged` events since `coordinator_start`), replayed with a wrap mod the trace length D.
`poll_intervals` says when a process that polls every `poll_s` while idle really runs inside a
timetable's intervals. A plug-in adds kinds of its own (models.cotenant.register_timetable: the
testbed's pressure schedule). Source: docs/testbed.md (the paper's testbed runs its co-tenant and
sync windows by these rules).
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

WINDOW_S = 8.0  # a replayed window's length unless given (the testbed's --sync-window-sec)


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
        """The membership test at t (scalar -> bool, array -> bool array); off outside [0, horizon]."""
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
        """The union: on while either is on."""
        if other.horizon != self.horizon:
            raise ValueError(f"horizons differ: {self.horizon} vs {other.horizon}")
        mine, theirs = self.rule, other.rule
        return Timetable(
            merge_intervals(self.intervals + other.intervals, self.horizon),
            self.horizon,
            lambda t: mine(t) | theirs(t),
        )


def check_horizon(horizon: float) -> None:
    if not horizon >= 0 or not math.isfinite(horizon):
        raise ValueError(f"horizon must be finite and >= 0, got {horizon}")


# ---------------------------------------------------------------------------------------------
# periodic windows and the bursty busy test


def periodic(period: float, window: float, inclusive: bool = True, *, horizon: float, phase: float = 0.0) -> Timetable:
    """Active when `(t + phase) mod period <= window` (`<` when not inclusive)."""
    if not period > 0 or window < 0:
        raise ValueError(f"need period > 0 and window >= 0, got {period}, {window}")
    check_horizon(horizon)
    first = math.floor(phase / period)
    last = math.ceil((horizon + phase) / period)
    intervals = [(k * period - phase, k * period - phase + window) for k in range(first - 1, last + 1)]

    def rule(t: np.ndarray) -> np.ndarray:
        u = np.mod(t + phase, period)
        return u <= window if inclusive else u < window

    return Timetable(merge_intervals(intervals, horizon), horizon, rule)


def bursty(period: float = 120.0, window: float = 30.0, phase: float = 0.0, *, horizon: float) -> Timetable:
    """The busy test of a bursty load, `(t + phase) mod period < window` (strict)."""
    return periodic(period, window, inclusive=False, horizon=horizon, phase=phase)


# ---------------------------------------------------------------------------------------------
# replayed windows


def poll_intervals(intervals: Sequence[tuple[float, float]], poll_s: float) -> list[tuple[float, float]]:
    """When a process that polls every `poll_s` while idle really runs inside `intervals`: from the
    first poll tick at or after a window opens until it closes (0: exactly when it opens)."""
    out = []
    for a, b in intervals:
        on = np.ceil(a / poll_s - 1e-9) * poll_s if poll_s > 0 else a
        if on <= b:
            out.append((float(on), float(b)))
    return out


def trace_duration(starts: Sequence[float], window: float = WINDOW_S, last_record: float | None = None) -> float:
    """D = the last record's time since coordinator_start, or the last start + window if larger."""
    tail = max(starts) + window if len(starts) else 0.0
    return max(tail, last_record if last_record is not None else 0.0)


def windows(
    starts: Sequence[float],
    window: float = WINDOW_S,
    *,
    duration: float | None = None,
    repeat: bool = True,
    horizon: float,
) -> Timetable:
    """Windows [s, s + window] (inclusive) with a replay's wrap: time t maps to t mod D when D > window,
    D = `duration` or `trace_duration(starts)`. A trace shorter than the horizon replays; a longer
    one is cut."""
    check_horizon(horizon)
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
class WindowTrace:
    """Window starts (s since the trace's origin) and the trace length D they replay with."""

    starts: tuple[float, ...]
    duration: float


def trace_from_events(records: Sequence[dict], window: float = WINDOW_S, file: object = None) -> WindowTrace:
    """Starts and D from a training coordinator's records: starts = (ts of merged - ts of
    coordinator_start) / 1000, D from the latest record (coordinator_stop in a complete log)."""
    begin = [r["ts_ms"] for r in records if r.get("event") == "coordinator_start"]
    if not begin:
        raise InputError(file, "", "no coordinator_start record: the window starts have no origin")
    t0 = begin[0]
    starts = tuple((r["ts_ms"] - t0) / 1000.0 for r in records if r.get("event") == "merged")
    last = (max(r["ts_ms"] for r in records) - t0) / 1000.0
    return WindowTrace(starts, trace_duration(starts, window, last))


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


def load_trace(path: str | Path, window: float = WINDOW_S) -> WindowTrace:
    """Read window starts from a coordinator JSONL log (3.4) or from one number (seconds) per line: a
    regular file within the input size limit, every number finite and in range (models.spec.files)."""
    path = Path(path)
    text = read_text(path, "windows or schedule file")
    if any(line.lstrip().startswith("{") for line in text.splitlines()):
        trace = trace_from_events(_json_records(text, path), window, path)
        if any(s < 0 for s in trace.starts):
            raise InputError(path, "ts_ms", "a `merged` record comes before coordinator_start")
        return trace
    starts = [x for _, x in number_lines(path, "window start (s)", 0.0, MAX_TS_MS / 1e3)]
    return WindowTrace(tuple(starts), trace_duration(starts, window))


def windows_from_file(path: str | Path, window: float = WINDOW_S, *, horizon: float, **kw) -> Timetable:
    trace = load_trace(path, window)
    return windows(trace.starts, window, duration=trace.duration, horizon=horizon, **kw)
