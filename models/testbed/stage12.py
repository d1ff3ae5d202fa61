"""Stage 12's generated sync schedules (docs/sources.md, testbed 3.6, `scripts/generate_stage12_schedules.py`).

Both are reproduced exactly (tests/testbed/test_testbed_pure.py checks the calibrated list and all 25 random
rows of 3.6). The readings that do so, and which are therefore the ones used:
- `random_matched`: one `random.Random(seed * 1009 + draw)`; each candidate is ONE `uniform(0, 592)`
  call (592 = duration - window); a candidate is rejected when it lies closer than 18 s to ANY start
  accepted so far (|s - earlier| < 18); draw until `count` are accepted; sort, THEN round to 3 decimals.
  No other reading was needed: this first one matches every row.
- `calibrated_replay`: candidates are the 0.5-s grid 0, 0.5, ..., 592; a candidate's cost is the exact
  busy time of [s, s + 8] under the bursty timetable (quiet 4 / busy 12, period 120, window 30,
  phase 0); candidates closer than 18 s to an already chosen start are excluded; for each target
  (i + 0.5) * 75 in order, the least cost wins, ties broken by the distance to the target, then by
  the earlier start. The least cost is over the whole grid (not a neighbourhood of the target): with
  this timetable both give the same list.
Both schedules have D = 600 s (3.4: they never wrap).
"""

from __future__ import annotations

import random

import numpy as np

from wadiloco.models.timetables import bursty

COUNT = 8  # the wa_diloco merge count of every seed (3.6)
DURATION_S = 600.0
WINDOW_S = 8.0
MIN_GAP_S = 18.0
GRID_S = 0.5
TARGET_SPACING_S = 75.0  # targets (i + 0.5) * 75 s


def random_matched(
    seed: int,
    draw: int,
    count: int = COUNT,
    duration: float = DURATION_S,
    window: float = WINDOW_S,
    min_gap: float = MIN_GAP_S,
) -> list[float]:
    """Stage 12's matched-random window starts for (seed, draw), in seconds, sorted."""
    rng = random.Random(seed * 1009 + draw)
    starts: list[float] = []
    while len(starts) < count:
        s = rng.uniform(0.0, duration - window)
        if all(abs(s - e) >= min_gap for e in starts):
            starts.append(s)
    return [round(s, 3) for s in sorted(starts)]


def calibrated_replay(
    count: int = COUNT,
    duration: float = DURATION_S,
    window: float = WINDOW_S,
    min_gap: float = MIN_GAP_S,
    period: float = 120.0,
    busy_window: float = 30.0,
    phase: float = 0.0,
) -> list[float]:
    """Stage 12's offline-calibrated window starts (the same for every seed)."""
    busy = bursty(period, busy_window, phase, horizon=duration)
    grid = np.arange(0.0, duration - window + GRID_S / 2, GRID_S)
    cost = np.array([busy.overlap(s, s + window) for s in grid])
    chosen: list[float] = []
    for i in range(count):
        target = (i + 0.5) * TARGET_SPACING_S
        free = np.ones(len(grid), dtype=bool)
        for c in chosen:
            free &= np.abs(grid - c) >= min_gap
        if not free.any():
            raise ValueError(f"no start left for target {target} s with a {min_gap} s gap")
        order = np.lexsort((grid, np.abs(grid - target), cost))  # last key first: cost, distance, start
        chosen.append(float(grid[next(j for j in order if free[j])]))
    return sorted(chosen)
