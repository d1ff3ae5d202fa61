"""Closed forms for a run of pure-decode iterations, so the engine can skip over them exactly.

While batch membership is fixed (no admission, no completion, no prefill) and the engine has
its resources to itself, iteration i of a run takes max(h, g0 + i*dg): the host part h is
constant and the GPU part grows by dg = c*B per iteration because every sequence's context grows
by one token. The first m iterations are host-bound (h > g_i), the rest GPU-bound, so the
run's length is a sum of a constant part and an arithmetic series.
"""

from __future__ import annotations

import math


def host_bound_count(k: int, g0: float, dg: float, h: float) -> int:
    """How many of the first k iterations have h > g_i."""
    if h <= g0:
        return 0
    if dg <= 0:
        return k
    return min(k, math.ceil((h - g0) / dg))


def run_time(k: int, g0: float, dg: float, h: float) -> float:
    """sum_{i<k} max(h, g0 + i*dg)."""
    if k <= 0:
        return 0.0
    if h <= g0:  # no host-bound iteration (m = 0): the general expression reduces to this exactly
        return k * g0 + dg * (k * (k - 1) / 2)
    # m = host_bound_count(k, g0, dg, h), inlined: this runs once per fast-forwarded run
    if dg <= 0:
        m = k
    else:
        m = math.ceil((h - g0) / dg)
        if m > k:
            m = k
    if m and h <= g0 + (m - 1) * dg:  # ceil landed on an exact tie
        m -= 1
    return m * h + (k - m) * g0 + dg * (k * (k - 1) / 2 - m * (m - 1) / 2)


def _guess(t: float, g0: float, dg: float, h: float) -> int:
    m_all = host_bound_count(10**12, g0, dg, h)
    if t <= m_all * h:
        return int(t // h) if h > 0 else 0
    t2 = t - m_all * h
    base = g0 + m_all * dg
    if dg <= 0:
        return m_all + (int(t2 // base) if base > 0 else 0)
    # dg/2 x^2 + (base - dg/2) x - t2 = 0
    bq = base - dg / 2
    x = (-bq + math.sqrt(bq * bq + 2 * dg * t2)) / dg
    return m_all + max(0, int(x))


def iters_within(t: float, g0: float, dg: float, h: float, kmax: int) -> int:
    """Largest k <= kmax whose run ends by t (run_time(k) <= t)."""
    k = min(kmax, max(0, _guess(t, g0, dg, h)))
    while k < kmax and run_time(k + 1, g0, dg, h) <= t:
        k += 1
    while k > 0 and run_time(k, g0, dg, h) > t:
        k -= 1
    return k


def iters_to_reach(t: float, g0: float, dg: float, h: float, kmax: int) -> int:
    """Smallest k in [1, kmax] whose run ends at or after t (kmax if none does)."""
    k = iters_within(t, g0, dg, h, kmax)
    if run_time(k, g0, dg, h) < t:
        k += 1
    return max(1, min(k, kmax))


# ---- the GPU-bound case (h <= g0), inlined for the engine's hot path --------------------------
# Every iteration is GPU-bound, so run_time(k) = k*g0 + dg*k*(k-1)/2, and the expression below
# is the one run_time evaluates when it finds no host-bound iteration (bit for bit). The search
# starts from the same guess as iters_to_reach and steps the same way, so it returns the same k.


def gpu_run_time(k: int, g0: float, dg: float) -> float:
    """run_time(k, g0, dg, h) for k >= 0 and any h <= g0."""
    return k * g0 + dg * (k * (k - 1) / 2) if k > 0 else 0.0


def gpu_iters_to_reach(t: float, g0: float, dg: float, kmax: int) -> int:
    """iters_to_reach(t, g0, dg, h, kmax) for t > 0 and any h <= g0."""
    if dg <= 0:
        k = int(t // g0) if g0 > 0 else 0
    else:
        bq = g0 - dg / 2
        k = max(0, int((-bq + math.sqrt(bq * bq + 2 * dg * t)) / dg))
    # iters_within: the largest k <= kmax whose run ends by t ...
    k = min(kmax, k)
    while k < kmax and (k + 1) * g0 + dg * ((k + 1) * k / 2) <= t:
        k += 1
    while k > 0 and k * g0 + dg * (k * (k - 1) / 2) > t:
        k -= 1
    # ... then one more if it ends before t
    if (k * g0 + dg * (k * (k - 1) / 2) if k > 0 else 0.0) < t:
        k += 1
    return max(1, min(k, kmax))
