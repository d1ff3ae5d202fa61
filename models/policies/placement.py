"""Corridor-feasible merge placements: count them, sample one uniformly, find the cheapest.

Plain numpy, no SimPy. The policies `matched_random` (uniform sampler) and
`overlap_oracle` (minimum-cost dynamic programme) are thin wrappers around this module.

The placement problem
---------------------
Place `n` merges at inner steps `start < s_1 < ... < s_n` such that every gap, including the
first one from `start` (step 0, or the last merge already done), lies in `[h_min, h_max]`, and
the last merge `s_n` (or `start` itself when `n == 0`) falls in a *final window*
`[last_lo, last_hi]`. The final window encodes the end of the run: the run must still reach
`s_n` (so `s_n <= last_hi`, a step the run surely completes) and the tail after it must be no
longer than the corridor allows (`models.results.invariants.check_corridor`: `final_step - s_n <=
h_max + 1`, so `s_n >= last_lo = final_step - h_max - 1`). `final_window` builds the window
from a run length and a slack that absorbs run-to-run variation of that length.

Counting and uniform sampling
-----------------------------
Let `N_j[k]` be the number of ways to place merges 1..j with merge j at step k. Then
`N_0 = [k == start]` and `N_j[k] = sum_{g=h_min}^{h_max} N_{j-1}[k-g]`, a convolution with a
box of width `h_max - h_min + 1`. The number of feasible placements is
`sum_{k in final window} N_n[k]`. Exact uniform sampling then goes backwards: draw `s_n` with
probability proportional to `N_n[s_n]` over the final window, then `s_{j-1}` proportional to
`N_{j-1}` over `[s_j - h_max, s_j - h_min]`, and so on. The probability of a whole placement is
the telescoping product `1/total`, i.e. every feasible placement is equally likely.
Rows are rescaled to a maximum of 1 after each convolution (sampling within a row only needs
ratios) so counts never overflow; the box sums are computed directly (`np.convolve` of
non-negative numbers), so an infeasible step keeps a count of exactly 0 and is never drawn.

Minimum cost
------------
`min_cost_placement` takes a cost matrix `cost[j, k]` (cost of making the (j+1)-th merge at step
k; the cost may depend on j because earlier merges delay the wall-clock time of step k) and
solves `B_j[k] = cost[j-1, k] + min_{g} B_{j-1}[k-g]` with back-pointers: O(n * T * width).
Ties go to the earliest predecessor, so the answer is deterministic.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator

import numpy as np

MAX_CELLS = 50_000_000  # n x steps above which the exact tables would not fit comfortably in memory


class PlacementError(ValueError):
    """No placement satisfies the corridor (or the problem is malformed)."""


def _check(n: int, h_min: int, h_max: int, last_lo: int, last_hi: int, start: int) -> None:
    if n < 0:
        raise PlacementError(f"merge count must be >= 0 (got {n})")
    if not (1 <= h_min <= h_max):
        raise PlacementError(f"need 1 <= h_min <= h_max (got {h_min}, {h_max})")
    if last_hi < start:
        raise PlacementError(f"final window ends at {last_hi}, before the start step {start}")
    if (n + 1) * (last_hi - start + 1) > MAX_CELLS:
        raise PlacementError(
            f"{n} merges over {last_hi - start} steps is too large for the exact "
            f"placement tables ({MAX_CELLS:,d} cells); shorten the horizon"
        )


def final_window(n_steps: int, h_max: int, slack: int = 0) -> tuple[int, int]:
    """Final window for a run that completes `n_steps` inner steps, give or take `slack`.

    The last merge must be reached even if the run completes only `n_steps - slack` steps, and
    the tail must satisfy the corridor rule (`<= h_max + 1`) even if it completes
    `n_steps + slack`."""
    return n_steps + slack - h_max - 1, n_steps - slack


def feasible_range(n: int, h_min: int, h_max: int, last_lo: int, last_hi: int, start: int = 0) -> bool:
    """Quick test whether at least one placement exists (gaps are contiguous integers, so the
    reachable last steps form one interval [start + n*h_min, start + n*h_max])."""
    if n == 0:
        return last_lo <= start <= last_hi
    lo, hi = start + n * h_min, start + n * h_max
    return max(lo, last_lo) <= min(hi, last_hi)


def _rows(n: int, h_min: int, h_max: int, last_hi: int, start: int) -> np.ndarray:
    """Scaled counts N_j[k] for j = 0..n over k = start..last_hi (index k - start)."""
    T = last_hi - start + 1
    rows = np.zeros((n + 1, T))
    rows[0, 0] = 1.0
    box = np.ones(h_max - h_min + 1)
    for j in range(1, n + 1):
        full = np.convolve(rows[j - 1], box)  # full[i] = sum_{d=0}^{W-1} prev[i-d]
        # N_j[i] = sum_{g=h_min}^{h_max} prev[i-g] = full[i - h_min]
        r = np.zeros(T)
        if h_min < T:
            r[h_min:] = full[: T - h_min]
        m = r.max()
        rows[j] = r / m if m > 0 else r
    return rows


def count_placements(n: int, h_min: int, h_max: int, last_lo: int, last_hi: int, start: int = 0) -> int:
    """Exact number of feasible placements (Python integers; meant for small instances and tests)."""
    _check(n, h_min, h_max, last_lo, last_hi, start)
    T = last_hi - start + 1
    row = [0] * T
    row[0] = 1
    for _ in range(n):
        new = [0] * T
        for i in range(T):
            new[i] = sum(row[i - g] for g in range(h_min, h_max + 1) if i - g >= 0)
        row = new
    return sum(row[i] for i in range(max(0, last_lo - start), T))


def enumerate_placements(
    n: int, h_min: int, h_max: int, last_lo: int, last_hi: int, start: int = 0
) -> Iterator[tuple[int, ...]]:
    """Every feasible placement in lexicographic order, by brute force (for tests)."""
    _check(n, h_min, h_max, last_lo, last_hi, start)

    def rec(prev: int, left: int, acc: tuple[int, ...]):
        if left == 0:
            if last_lo <= prev <= last_hi:
                yield acc
            return
        for g in range(h_min, h_max + 1):
            s = prev + g
            if s > last_hi:
                break
            yield from rec(s, left - 1, acc + (s,))

    yield from rec(start, n, ())


class UniformSampler:
    """Uniform sampler over the feasible placements of one problem; the counting tables are built
    once, so drawing many placements (matched-random envelopes, tests) is cheap."""

    def __init__(self, n: int, h_min: int, h_max: int, last_lo: int, last_hi: int, start: int = 0):
        _check(n, h_min, h_max, last_lo, last_hi, start)
        if not feasible_range(n, h_min, h_max, last_lo, last_hi, start):
            raise PlacementError(_infeasible_msg(n, h_min, h_max, last_lo, last_hi, start))
        self.n, self.h_min, self.h_max, self.start = n, h_min, h_max, start
        self.rows = _rows(n, h_min, h_max, last_hi, start) if n else None
        self.lo = max(0, last_lo - start)
        if n and not np.any(self.rows[n, self.lo :] > 0):  # pragma: no cover - feasible_range said otherwise
            raise PlacementError(_infeasible_msg(n, h_min, h_max, last_lo, last_hi, start))

    def sample(self, rng: np.random.Generator) -> list[int]:
        n, rows = self.n, self.rows
        if n == 0:
            return []
        out = [0] * n
        i = self.lo + _draw(rows[n, self.lo :], rng)
        out[n - 1] = i
        for j in range(n - 1, 0, -1):
            a, b = max(0, i - self.h_max), i - self.h_min
            i = a + _draw(rows[j, a : b + 1], rng)
            out[j - 1] = i
        return [self.start + i for i in out]


def sample_placement(
    n: int, h_min: int, h_max: int, last_lo: int, last_hi: int, rng: np.random.Generator, start: int = 0
) -> list[int]:
    """One placement drawn uniformly from all feasible ones (see the module docstring). The sampler
    of a problem is kept: a seed's matched-random draws in one process share its counting tables."""
    return _sampler(int(n), int(h_min), int(h_max), int(last_lo), int(last_hi), int(start)).sample(rng)


@functools.lru_cache(maxsize=16)
def _sampler(n: int, h_min: int, h_max: int, last_lo: int, last_hi: int, start: int) -> UniformSampler:
    return UniformSampler(n, h_min, h_max, last_lo, last_hi, start)  # read-only once built


def _draw(weights: np.ndarray, rng: np.random.Generator) -> int:
    """Index i with probability weights[i] / sum (zero weights are never drawn)."""
    c = np.cumsum(weights)
    i = int(np.searchsorted(c, rng.random() * c[-1], side="right"))
    if i >= len(c):  # the rounding edge u * total == total: the last positive weight
        i = int(np.flatnonzero(weights)[-1])
    return i


def min_cost_placement(
    cost: np.ndarray, n: int, h_min: int, h_max: int, last_lo: int, last_hi: int, start: int = 0
) -> tuple[list[int], float]:
    """Feasible placement minimising sum_j cost[j, s_{j+1}], and that minimum.

    `cost` has shape (n, last_hi + 1): row j is the cost of making merge j+1 at step k (absolute
    step index). Columns before `start` are ignored."""
    _check(n, h_min, h_max, last_lo, last_hi, start)
    cost = np.asarray(cost, dtype=float)
    if cost.shape != (n, last_hi + 1):
        raise PlacementError(f"cost must have shape ({n}, {last_hi + 1}), got {cost.shape}")
    if not feasible_range(n, h_min, h_max, last_lo, last_hi, start):
        raise PlacementError(_infeasible_msg(n, h_min, h_max, last_lo, last_hi, start))
    if n == 0:
        return [], 0.0
    T = last_hi - start + 1
    W = h_max - h_min + 1
    best = np.full(T, np.inf)
    best[0] = 0.0
    back = np.zeros((n + 1, T), dtype=np.int64)
    table = [best]
    for j in range(1, n + 1):
        prev = table[-1]
        # For target i, predecessors are i-h_max .. i-h_min. Pad on the left with h_max infs so
        # window i of the padded array is prev[i-h_max .. i-h_min].
        padded = np.concatenate([np.full(h_max, np.inf), prev])
        win = np.lib.stride_tricks.sliding_window_view(padded[: T + h_max - h_min], W)
        arg = win.argmin(axis=1)
        mins = win[np.arange(T), arg]
        cur = mins + cost[j - 1, start:]
        cur[~np.isfinite(mins)] = np.inf
        back[j] = np.arange(T) - h_max + arg
        table.append(cur)
    lo = max(0, last_lo - start)
    final = table[n][lo:]
    k = int(np.argmin(final))
    total = float(final[k])
    if not np.isfinite(total):  # pragma: no cover - feasible_range said otherwise
        raise PlacementError(_infeasible_msg(n, h_min, h_max, last_lo, last_hi, start))
    i = lo + k
    out = [0] * n
    for j in range(n, 0, -1):
        out[j - 1] = i
        i = int(back[j, i])
    return [start + i for i in out], total


def _infeasible_msg(n: int, h_min: int, h_max: int, last_lo: int, last_hi: int, start: int) -> str:
    return (
        f"{n} merge(s) after step {start} cannot satisfy the corridor [{h_min}, {h_max}] with the "
        f"last merge in steps [{last_lo}, {last_hi}] (reachable last steps: "
        f"[{start + n * h_min}, {start + n * h_max}])"
    )


__all__ = [
    "PlacementError",
    "final_window",
    "feasible_range",
    "count_placements",
    "enumerate_placements",
    "UniformSampler",
    "sample_placement",
    "min_cost_placement",
]
