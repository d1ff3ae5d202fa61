"""The testbed's closed loop as a two-level fluid: the exact answer the simulated twin must give.

A batch of c requests needs `work` seconds of the serving GPU at full speed (its iterations times the
per-iteration time). While the GPU co-tenant runs, the serving job keeps 1/(1+w) of the GPU (weighted
fair sharing against a hold of weight w, as `sim.fabric` shares it), so the batch drains at that rate;
otherwise at 1. The next batch starts when the last one ends (plus a client gap). That is all the
GPU-bound twin does, so this plain loop is both the fast evaluator used to fit Stage 10
(models.testbed.fit) and the oracle the full simulator is tested against.

Times are seconds since the testbed's `start` (before engine init); serving begins at `start_delay`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from wadiloco.models.timetables import poll_intervals

POLL_S = 0.05  # the stress loop sleeps 50 ms between checks while idle (docs/sources.md, testbed 3.1)


def stress_intervals(intervals: Sequence[tuple[float, float]], poll_s: float = POLL_S) -> list[tuple[float, float]]:
    """When the co-tenant really runs: from the first poll tick at or after a window opens until it
    closes (models.timetables.poll_intervals; the last burst's few milliseconds past the close are ignored)."""
    return poll_intervals(intervals, poll_s)


@dataclass(frozen=True)
class Batches:
    """One closed-loop run: per batch its start, end, size and output tokens."""

    start: np.ndarray
    end: np.ndarray
    size: np.ndarray
    output: np.ndarray

    @property
    def latency(self) -> np.ndarray:
        return self.end - self.start


def drain(t: float, work: float, intervals: Sequence[tuple[float, float]], i: int, slow: float) -> tuple[float, int]:
    """End of `work` started at t, draining at 1 outside `intervals` and at `slow` inside; `i` is the
    first interval that may end after t (returned advanced, for the next call)."""
    n = len(intervals)
    while i < n and intervals[i][1] <= t:
        i += 1
    while True:
        if i >= n:
            return t + work, i
        a, b = intervals[i]
        if t < a:  # full speed until the next interval
            if work <= a - t:
                return t + work, i
            work -= a - t
            t = a
        cap = (b - t) * slow
        if work <= cap:
            return t + work / slow, i
        work -= cap
        t = b
        i += 1


def closed_loop(
    start_delay: float,
    duration: float,
    work: Callable[[int, int], tuple[float, int, int]],
    intervals: Sequence[tuple[float, float]],
    weight: float,
    client_gap: float = 0.0,
) -> Batches:
    """Batches back to back from `start_delay` while a batch can start before `duration` (the last
    may end after it). `work(k, start) -> (full-speed seconds, size, output tokens)` of batch k."""
    slow = 1.0 / (1.0 + weight)
    starts, ends, sizes, outs = [], [], [], []
    t, i, k = float(start_delay), 0, 0
    while t < duration:
        w, size, out = work(k, t)
        end, i = drain(t, w, intervals, i, slow)
        starts.append(t)
        ends.append(end)
        sizes.append(size)
        outs.append(out)
        t = end + client_gap
        k += 1
    return Batches(np.array(starts), np.array(ends), np.array(sizes, dtype=np.int64), np.array(outs, dtype=np.int64))
