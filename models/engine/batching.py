"""Closed forms for a run of pure-decode iterations, so the engine can skip over them exactly.

While batch membership is fixed (no admission, no completion, no prefill) and the engine has
its resources to itself, iteration i of a run takes max(h, g0 + i*dg): the host part h is
constant and the GPU part is the engine's latency law's line for decode runs (models.engine.laws
`decode_line`: for the linear law dg = c*B, every sequence's context growing by one token an
iteration). The first m iterations are host-bound (h > g_i), the rest GPU-bound, so the run's
length is a sum of a constant part and an arithmetic series. A law without such a line (`line`
off: a table of measured times) is never timed here: the engine steps it one iteration at a time.

Engine generations (`EngineStep`) change only what h and g0 are, never the form: with host work h
(scheduler, input preparation, sampling, detokenisation: h0 + h1*batch + h2*scheduled_tokens, on
the engine's CPU path) and frontend work f (the API server: per request and per output token, on
its own CPU path), an `overlapped` iteration (vLLM V1, async scheduling) takes max(h, f, g) and a
`sequential` one (vLLM V0: schedule, then the GPU step, then output processing) takes h + g + f.
So an overlapped run is run_time(k, g0, dg, max(h, f)) and a sequential one is
run_time(k, h + f + g0, dg, 0), a sum of h + g terms (`compose` gives the pair).

This module is the only place that length is computed: the serving core (models/engine/serving.py)
times a step with `run_time` (or `reach`, to stop at an arrival) and divides an interrupted
one with `split` (and `rest`, for the work left in the iteration it stopped in).
"""

from __future__ import annotations

import math
from typing import NamedTuple


class EngineStep(NamedTuple):
    """How an iteration's host work is sized and composed with its GPU work (besides the fixed
    host time h0 = engine.host_overhead_s). The defaults are today's engine: overlapped, host work
    independent of the batch, no frontend path."""

    sequential: bool = False  # vLLM V0 order (h + g + f) instead of V1's overlap (max(h, f, g))
    host_per_seq_s: float = 0.0  # h1: per sequence in the batch (sampling, per-request bookkeeping)
    host_per_token_s: float = 0.0  # h2: per scheduled token (input preparation)
    front_per_request_s: float = 0.0  # API server: per admitted request (parsing, tokenisation)
    front_per_token_s: float = 0.0  # API server: per output token (detokenisation, streaming)

    @property
    def frontend(self) -> bool:
        return self.front_per_request_s > 0 or self.front_per_token_s > 0


TODAYS_STEP = EngineStep()  # overlapped, constant host work, no frontend


def compose(g: float, h: float, f: float, sequential: bool) -> tuple[float, float]:
    """The (g0, h) pair `run_time` takes for an iteration with GPU time g, host time h and frontend
    time f (each already at its link's speed). models/engine/serving.py inlines it."""
    if sequential:
        return h + f + g, 0.0
    return g, (f if f > h else h)


def rest(e: float, g: float, h: float, f: float, speeds: tuple[float, float, float], sequential: bool):
    """The (GPU, host, frontend) work left of an iteration with work g, h, f run for e seconds at
    `speeds` (rg, rh, rf): in overlap every part ran all along; in sequence host, then GPU, then
    frontend. A part that is done has 0."""
    rg, rh, rf = speeds
    if not sequential:
        g, h, f = g - e * rg, h - e * rh, f - e * rf
    else:
        th, tg = h / rh, g / rg
        if e < th:
            h -= e * rh
        elif e < th + tg:
            g, h = g - (e - th) * rg, 0.0
        else:
            g, h, f = 0.0, 0.0, f - (e - th - tg) * rf
    return (g if g > 0 else 0.0), (h if h > 0 else 0.0), (f if f > 0 else 0.0)


def host_bound_count(k: int, g0: float, dg: float, h: float) -> int:
    """How many of the first k iterations have h > g_i (ceil can land one past an exact tie)."""
    if h <= g0:
        return 0
    if dg <= 0:
        return k
    x = (h - g0) / dg
    m = k if x >= k else math.ceil(x)  # min(k, ceil(x)) without an integer as large as x
    if m and h <= g0 + (m - 1) * dg:
        m -= 1
    return m


def run_time(k: int, g0: float, dg: float, h: float) -> float:
    """sum_{i<k} max(h, g0 + i*dg): the first m = host_bound_count(k, ...) iterations take h."""
    if k <= 0:
        return 0.0
    if h <= g0:  # no host-bound iteration (m = 0): the general expression reduces to this exactly
        return k * g0 + dg * (k * (k - 1) / 2)
    # m = host_bound_count(k, g0, dg, h), inlined: this runs once per step of the engine
    if dg <= 0:
        m = k
    else:
        x = (h - g0) / dg
        m = k if x >= k else math.ceil(x)
    if m and h <= g0 + (m - 1) * dg:
        m -= 1
    return m * h + (k - m) * g0 + dg * (k * (k - 1) / 2 - m * (m - 1) / 2)


def _guess(t: float, g0: float, dg: float, h: float, kmax: int) -> int:
    """Where the search of `iters_within` starts, in [0, kmax]: the run length solved in reals.
    Only a start: `_search` steps from it to the exact answer, so any guess gives the same result
    (a good one, fewer steps); computed in floats and clamped, so it is a 64-bit integer."""
    m_all = host_bound_count(kmax, g0, dg, h)  # the host-bound iterations among the first kmax
    if t <= m_all * h:
        x = t / h if h > 0 else 0.0
    else:
        t2 = t - m_all * h
        base = g0 + m_all * dg
        if dg <= 0:
            x = m_all + (t2 / base if base > 0 else 0.0)
        else:  # dg/2 x^2 + (base - dg/2) x - t2 = 0
            bq = base - dg / 2
            x = m_all + (-bq + math.sqrt(bq * bq + 2 * dg * t2)) / dg
    return kmax if x >= kmax else (int(x) if x > 0 else 0)  # (NaN: 0)


def _search(t: float, g0: float, dg: float, h: float, kmax: int) -> tuple[int, float, float]:
    """The largest k <= kmax whose run ends by t, its run time, and that of k + 1 when the
    search computed it (-1.0 when not: a run time is never negative; no None, so the compiled
    module returns three C values)."""
    k = _guess(t, g0, dg, h, kmax)
    r = run_time(k, g0, dg, h)
    up = -1.0
    while k < kmax:
        up = run_time(k + 1, g0, dg, h)
        if up > t:
            break
        k, r, up = k + 1, up, -1.0
    while k > 0 and r > t:
        k, up = k - 1, r
        r = run_time(k, g0, dg, h)
    return k, r, up


def iters_within(t: float, g0: float, dg: float, h: float, kmax: int) -> int:
    """Largest k <= kmax whose run ends by t (run_time(k) <= t)."""
    return _search(t, g0, dg, h, kmax)[0]


def reach(t: float, g0: float, dg: float, h: float, kmax: int) -> tuple[int, float]:
    """(k, run_time(k)) for the smallest k in [1, kmax] whose run ends at or after t (kmax if
    none does): how far a run goes before the engine looks at an arrival due at t."""
    k, r, up = _search(t, g0, dg, h, kmax)
    if r < t and k < kmax:
        k += 1
        r = run_time(k, g0, dg, h) if up < 0.0 else up
    if k < 1:
        return 1, run_time(1, g0, dg, h)
    return k, r


def before(t: float, g0: float, dg: float, h: float, kmax: int) -> tuple[int, float]:
    """(k, run_time(k)) for the largest k in [1, kmax] whose run ends by t (1 if none does): a run
    stopped there leaves the iteration in flight at t to a step of its own, so whatever looks at
    the engine at t (a router) finds it as it would stepping one iteration at a time."""
    k, r, _ = _search(t, g0, dg, h, kmax)
    if k < 1:
        return 1, run_time(1, g0, dg, h)
    return k, r


def split(t: float, g0: float, dg: float, h: float, kmax: int) -> tuple[int, float]:
    """A run of kmax iterations stopped t after it began: (iterations done, time spent in the
    next one)."""
    k, r, _ = _search(t, g0, dg, h, kmax)
    return k, t - r
